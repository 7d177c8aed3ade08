// Command flux-deploy-notifier turns Flux's Kustomization events into one
// verdict per commit, for people (mail) and pipelines (/verdict).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	// Root certificates inside the binary, used when the system has none
	// (FROM scratch, a distroless image without them): TLS to an SMTP
	// server must verify wherever the binary runs.
	_ "golang.org/x/crypto/x509roots/fallback"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var exit exitCode
		if errors.As(err, &exit) {
			os.Exit(int(exit))
		}
		if errors.Is(err, flag.ErrHelp) {
			// The flags were printed, as asked: not a failure.
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "flux-deploy-notifier:", err)
		os.Exit(2)
	}
}

// exitCode ends the process with a code that means something to the
// caller (the wait command's verdicts); what to say was already printed.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

const usage = `flux-deploy-notifier: one verdict per commit for Flux CD deploys

Usage:
  flux-deploy-notifier serve  [flags]   receive Flux events, serve /verdict
  flux-deploy-notifier sample [flags]   post a sample rollout to a running service
  flux-deploy-notifier wait   [flags]   wait for a commit's verdict: the pipeline gate
  flux-deploy-notifier manifests [flags] print the Provider, Alert and Secret for notification-controller;
                                       with --reader, a hub's access to this cluster; --register, the hub's Secret for it
  flux-deploy-notifier migrate [flags]  copy a bbolt state into PostgreSQL, for several replicas

Run "flux-deploy-notifier <command> -h" for the flags of a command.
Every flag can also be set with the environment variable shown in its help.
`

// run is main without the process: tests call it with their own arguments,
// environment and output.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stdout, stderr)
	case "sample":
		return sample(ctx, args[1:], getenv, stdout, stderr)
	case "wait":
		return waitCommand(ctx, args[1:], getenv, stdout, stderr)
	case "manifests":
		return manifests(ctx, args[1:], getenv, stdout, stderr)
	case "migrate":
		return migrate(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
