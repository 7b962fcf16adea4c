//go:build !chaosbreak

package main

// buildHooks are the binary's hooks: none. (A build with the chaosbreak tag
// breaks the engine on purpose; see hooks_chaosbreak.go.)
func buildHooks() hooks { return hooks{} }
