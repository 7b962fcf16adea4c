package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyConfigFile sets, from the YAML file at path, every flag of fs whose
// source in src is the default (not set on the command line or by the
// environment), and records the file and line as its source: the keys
// are the flags' names (e.g. state-dir: /var/lib/differential), so a value
// is parsed and validated by the same code whichever way it comes. A key in
// ignore (another command's setting) is skipped; a key that names no flag,
// a nested value, or a duplicate key is an error naming the key and its
// line. A broker list may be a YAML sequence or a comma-separated string.
func applyConfigFile(fs *flag.FlagSet, path string, src sources, ignore map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return usagef("--config: %w", err)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return usagef("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return usagef("config file %s:%d: the document must be a mapping of flag names to values", path, root.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		at := fmt.Sprintf("config file %s:%d", path, k.Line)
		if line, dup := seen[key]; dup {
			return usagef("%s: key %q appears twice (first on line %d)", at, key, line)
		}
		seen[key] = k.Line
		f := fs.Lookup(key)
		if f == nil && ignore[key] {
			continue
		}
		if f == nil || key == "config" || key == "print-config" {
			return usagef("%s: unknown key %q%s", at, key, suggest(fs, key, ignore))
		}
		val, err := scalarOf(v)
		if err != nil {
			return usagef("%s: key %q: %w", at, key, err)
		}
		if src[key].kind != fromDefault {
			continue
		}
		if err := fs.Set(key, val); err != nil {
			if secretFlags[key] {
				return usagef("%s: key %q: invalid value: %w", at, key, err)
			}
			return usagef("%s: key %q: invalid value %q: %w", at, key, val, err)
		}
		src[key] = source{kind: fromFile, where: fmt.Sprintf("%s:%d", path, k.Line)}
	}
	return nil
}

// scalarOf returns a YAML value as flag text: a scalar as written, a
// sequence of scalars joined with commas.
func scalarOf(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		parts := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("a list may hold only plain values")
			}
			parts = append(parts, c.Value)
		}
		return strings.Join(parts, ","), nil
	default:
		return "", errors.New("must be a plain value or a list, not a mapping")
	}
}

// suggest names the key closest to an unknown one (a flag of fs or another
// command's key), or lists fs's flags.
func suggest(fs *flag.FlagSet, key string, others map[string]bool) string {
	if best := closest(fs, key, others); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" && f.Name != "print-config" {
			names = append(names, f.Name)
		}
	})
	return " (the keys are the flags' names: " + strings.Join(names, ", ") + ")"
}

// closest returns the flag of fs or the other command's key nearest to
// key, within an edit distance of 2 ("" when none is).
func closest(fs *flag.FlagSet, key string, others map[string]bool) string {
	best, bestD := "", 3
	consider := func(name string) {
		if d := editDistance(strings.ToLower(key), name); d < bestD || (d == bestD && best != "" && name < best) {
			best, bestD = name, d
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" && f.Name != "print-config" {
			consider(f.Name)
		}
	})
	for _, name := range slices.Sorted(maps.Keys(others)) {
		consider(name)
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
