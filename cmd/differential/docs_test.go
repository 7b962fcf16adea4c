package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// docFiles are the Markdown files a reader is pointed to: README.md, the
// pages of docs/, DESIGN.md and CHANGELOG.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	return append([]string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "DESIGN.md"),
		filepath.Join(repoRoot, "CHANGELOG.md")}, pages...)
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// fence is one fenced code block of a Markdown file.
type fence struct {
	lang string
	line int // of the opening fence, 1-based
	body []string
}

func fences(text string) []fence {
	var out []fence
	var cur *fence
	for i, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &fence{lang: strings.TrimPrefix(trimmed, "```"), line: i + 1}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body = append(cur.body, l)
		}
	}
	return out
}

// docCommand is a `differential ...` command line shown in a document.
type docCommand struct {
	where string
	args  []string
}

// invocation finds the differential binary in a shell line: `differential`,
// `./differential`, `go run ./cmd/differential`, after any variable
// assignments.
var invocation = regexp.MustCompile(`(?:^|[\s;&|(])(?:go run \./cmd/differential|\./differential|differential)\s+([a-z][a-z-]*(?:\s.*)?)$`)

// docCommands returns every differential command line of the shell blocks
// (sh, bash, console, or none) of the given files, continuation lines
// joined, comments cut.
func docCommands(t *testing.T, paths []string) []docCommand {
	t.Helper()
	var out []docCommand
	for _, path := range paths {
		for _, f := range fences(readDoc(t, path)) {
			switch f.lang {
			case "sh", "bash", "console", "shell", "":
			default:
				continue
			}
			var joined []string
			var pending string
			for _, l := range f.body {
				if strings.HasSuffix(l, `\`) {
					pending += strings.TrimSuffix(l, `\`) + " "
					continue
				}
				joined = append(joined, pending+l)
				pending = ""
			}
			for i, l := range joined {
				words := shellWords(l)
				line := strings.Join(words, " ")
				m := invocation.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				args := strings.Fields(m[1])
				out = append(out, docCommand{where: filepath.Base(path) + ":" + itoa(f.line+1+i), args: args})
			}
		}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// shellWords splits a shell line into words, quotes removed, up to the
// first comment, pipe, redirection or command separator.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == '#' && !inWord:
			flush()
			return words
		case r == '|' || r == '>' || r == '<' || r == ';' || r == '&':
			flush()
			return words
		case r == ' ' || r == '\t':
			flush()
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// requireDocCommandsParse: every `differential ...` command shown in
// README.md and docs/*.md names a command and flags the CLI accepts, with
// values its flags parse. Each is run with --help appended: the flags are
// parsed and the help printed, nothing is executed (a positional argument
// or a bad flag is a usage error instead).
func requireDocCommandsParse(t *testing.T) {
	t.Helper()
	paths := []string{filepath.Join(repoRoot, "README.md")}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	cmds := docCommands(t, append(paths, pages...))
	require.Greater(t, len(cmds), 20, "the documents show the CLI's commands")
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[c.args[0]] = true
		args := append(append([]string(nil), c.args...), "--help")
		code, _, errs := runCLI(t, hooks{}, args...)
		require.Equal(t, exitOK, code, "%s: differential %s does not parse: %s", c.where, strings.Join(c.args, " "), errs)
	}
	for _, name := range []string{"demo", "run", "produce", "bench", "heavykey", "version", "help"} {
		require.True(t, seen[name], "no document shows `differential %s`", name)
	}
}

// TestDocCommandsCatchABadFlag: the command check would see a misspelt
// flag, a bad value and a stray argument.
func TestDocCommandsCatchABadFlag(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--brokers", "k:9092", "--bufer", "10"},
		{"run", "--buffer", "lots"},
		{"produce", "--records", "10", "extra"},
		{"bench", "--gate", "sideways"},
	} {
		code, _, _ := runCLI(t, hooks{}, append(args, "--help")...)
		require.Equal(t, exitUsage, code, "%v", args)
	}
	cmds := docCommands(t, []string{writeDoc(t, "```sh\nFOO=1 differential run --brokers a:1 \\\n  --topic x   # note\ngo run ./cmd/differential demo --records 10 | tail\n```\n")})
	require.Len(t, cmds, 2)
	require.Equal(t, []string{"run", "--brokers", "a:1", "--topic", "x"}, cmds[0].args)
	require.Equal(t, []string{"demo", "--records", "10"}, cmds[1].args)
}

func writeDoc(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "doc.md")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// TestDocsListEveryFlag: docs/cli.md names every flag of every command.
func TestDocsListEveryFlag(t *testing.T) {
	cli := readDoc(t, filepath.Join(repoRoot, "docs", "cli.md"))
	flagLine := regexp.MustCompile(`(?m)^  (--[a-z0-9-]+)`)
	for _, cmd := range []string{"run", "produce", "demo", "bench", "heavykey"} {
		code, out, _ := runCLI(t, hooks{}, cmd, "--help")
		require.Equal(t, exitOK, code)
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			require.True(t, strings.Contains(cli, "`"+m[1]), "docs/cli.md does not list %s %s", cmd, m[1])
		}
	}
}

// goSource is every Go file of the repository, its lines trimmed.
func goSource(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			out[path] = trimmedLines(readDoc(t, path))
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func trimmedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func containsRun(hay, needle []string) bool {
	for i := 0; i+len(needle) <= len(hay); i++ {
		if slicesEqual(hay[i:i+len(needle)], needle) {
			return true
		}
	}
	return false
}

func slicesEqual(a, b []string) bool { return slices.Equal(a, b) }

// TestDocsFencesClose: every fenced block of the docs is closed by a line of
// its own, so that no block swallows the prose after it (and the snippet
// checks, which read closed blocks only, see every block).
func TestDocsFencesClose(t *testing.T) {
	for _, path := range docFiles(t) {
		open := 0
		for i, l := range strings.Split(readDoc(t, path), "\n") {
			trimmed := strings.TrimSpace(l)
			switch {
			case open == 0 && strings.HasPrefix(trimmed, "```"):
				open = i + 1
			case open != 0 && trimmed == "```":
				open = 0
			case strings.Contains(trimmed, "```") && !strings.HasPrefix(trimmed, "```"):
				t.Errorf("%s:%d: a fence mark inside a line (a closing fence stands on a line of its own)", path, i+1)
			}
		}
		if open != 0 {
			t.Errorf("%s:%d: the block opened here is never closed", path, open)
		}
	}
}

// TestDocsGoSnippetsCompile: every Go snippet of README.md and docs/*.md is
// quoted, line for line, from a Go file of the repository — so go vet and
// go test compile it — and the README's are whole Example functions, which
// go test runs and checks against their Output.
func TestDocsGoSnippetsCompile(t *testing.T) {
	src := goSource(t)
	paths := []string{filepath.Join(repoRoot, "README.md")}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	n, readme := 0, 0
	for _, path := range append(paths, pages...) {
		for _, f := range fences(readDoc(t, path)) {
			if f.lang != "go" {
				continue
			}
			n++
			snippet := trimmedLines(strings.Join(f.body, "\n"))
			found := ""
			for file, lines := range src {
				if containsRun(lines, snippet) {
					found = file
					break
				}
			}
			require.NotEmpty(t, found, "%s:%d: this Go snippet is not quoted from any Go file of the repository", path, f.line)
			if filepath.Base(path) == "README.md" {
				readme++
				require.True(t, strings.HasSuffix(found, "_test.go"), "%s:%d: quoted from %s, not a test file", path, f.line, found)
				require.Regexp(t, `^func Example\w*\(\) \{$`, snippet[0], "%s:%d: a README snippet is a whole Example", path, f.line)
				require.Equal(t, "}", snippet[len(snippet)-1], "%s:%d", path, f.line)
				require.Contains(t, snippet, "// Output:", "%s:%d: the Example checks its output", path, f.line)
			}
		}
	}
	require.Positive(t, n)
	require.Positive(t, readme, "the README's library example is checked")

	// The check itself: a snippet that is not in the code is refused.
	require.False(t, containsRun(src[filepath.Join(repoRoot, "chain", "hello_example_test.go")], []string{"func Example_helloWorld() {", "orders := byType(\"order\")"}))
}

// TestREADMEIsAFrontPage: at most 300 lines, and the first 150 hold the
// demo, the command for your own cluster, the event schema and the pointer
// to the library's hello world.
func TestREADMEIsAFrontPage(t *testing.T) {
	lines := strings.Split(readDoc(t, filepath.Join(repoRoot, "README.md")), "\n")
	require.LessOrEqual(t, len(lines), 300)
	head := strings.Join(lines[:min(150, len(lines))], "\n")
	for _, want := range []string{
		"go run ./cmd/differential demo",
		"differential run --brokers",
		`"user_id"`,
		"must equal `user_id`",
		"hello_example_test.go",
		"go test ./...",
	} {
		require.Contains(t, head, want)
	}
}

// TestDocLinksResolve: every relative link of README.md, DESIGN.md and
// docs/*.md names a file that exists and, with #anchor, a heading of it.
func TestDocLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, path := range docFiles(t) {
		text := readDoc(t, path)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
				_, err := os.Stat(dest)
				require.NoError(t, err, "%s: link %s", path, target)
			}
			if anchor != "" {
				require.True(t, anchors(readDoc(t, dest))[anchor], "%s: link %s: no such heading in %s", path, target, dest)
			}
		}
	}
}

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		out[anchor(strings.TrimSpace(strings.TrimLeft(l, "#")))] = true
	}
	return out
}

// anchor is GitHub's anchor of a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces as '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool { return strings.ContainsRune("àâäéèêëîïôöùûüçœæ", r) }

// TestVersionMatchesChangelog: the Version constant is the newest version
// CHANGELOG.md lists.
func TestVersionMatchesChangelog(t *testing.T) {
	m := regexp.MustCompile(`(?m)^## (\S+)`).FindStringSubmatch(readDoc(t, filepath.Join(repoRoot, "CHANGELOG.md")))
	require.NotNil(t, m, "CHANGELOG.md has a version heading")
	require.Equal(t, m[1], Version)
}

// TestVersionFromBuildInfo: a module version from the build information
// wins over the constant; a source tree's "(devel)" does not; the VCS
// revision follows, marked when the tree was modified.
func TestVersionFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/differential-dev/differential", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}
	require.Regexp(t, `^differential `+regexp.QuoteMeta(Version)+` 0123abcd\+dirty \(github.com/differential-dev/differential\) go`, formatVersion(bi))
	bi = &debug.BuildInfo{Main: debug.Module{Path: "github.com/differential-dev/differential", Version: "v1.2.3"}}
	require.Regexp(t, `^differential v1\.2\.3 \(github.com/differential-dev/differential\) go`, formatVersion(bi))
	require.Regexp(t, `^differential `+regexp.QuoteMeta(Version)+` \(`, formatVersion(nil))
	require.NotContains(t, versionString(), "(devel)")
}

// TestDesignReferencesResolve: every `DESIGN.md "Name"` reference in the
// Go code and the Markdown files names a heading of the repository's
// DESIGN.md, or the bold title a paragraph of it starts with; and no file
// points to a numbered section of a document outside the repository.
func TestDesignReferencesResolve(t *testing.T) {
	design := readDoc(t, filepath.Join(repoRoot, "DESIGN.md"))
	names := map[string]bool{}
	for _, l := range strings.Split(design, "\n") {
		if strings.HasPrefix(l, "#") {
			names[strings.TrimSpace(strings.TrimLeft(l, "#"))] = true
		}
	}
	var titles []string // bold paragraph titles; a reference may name their start
	for _, m := range regexp.MustCompile(`(?m)^(?:- )?\*\*([^*]+?)\.?\*\*`).FindAllStringSubmatch(design, -1) {
		titles = append(titles, strings.TrimSuffix(m[1], "."))
	}
	known := func(name string) bool {
		if names[name] {
			return true
		}
		for _, t := range titles {
			if strings.HasPrefix(t, name) {
				return true
			}
		}
		return false
	}
	ref := regexp.MustCompile(`DESIGN\.md[,:]?\s+(?://\s*)?\(?"([^"]+)"`)
	outside := regexp.MustCompile(`DESIGN \x{00A7}|\x{00A7} ?[0-9]`)
	files := docFiles(t)
	for path := range goSource(t) {
		files = append(files, path)
	}
	n := 0
	for _, path := range files {
		if filepath.Base(path) == "CHANGELOG.md" || filepath.Base(path) == "docs_test.go" {
			continue
		}
		text := readDoc(t, path)
		if loc := outside.FindStringIndex(text); loc != nil {
			t.Errorf("%s: %q points to a numbered section outside the repository", path, text[loc[0]:min(loc[1]+20, len(text))])
		}
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			n++
			name := strings.Join(strings.Fields(strings.ReplaceAll(m[1], "//", " ")), " ")
			if !known(name) {
				t.Errorf("%s: DESIGN.md %q names no heading or paragraph of DESIGN.md", path, name)
			}
		}
	}
	require.Positive(t, n)
}
