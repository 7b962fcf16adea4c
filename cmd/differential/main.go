package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore the default action: a second signal terminates
	}()
	stopProfile := startProfile(os.Stderr)
	code := cli(ctx, os.Args[1:], &env{stdout: os.Stdout, stderr: os.Stderr, lookupEnv: os.LookupEnv, environ: os.Environ, hooks: buildHooks()})
	stopProfile()
	os.Exit(code)
}
