package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/wait"
)

// Exit codes of wait, for pipelines (wait.Code).
const (
	exitFailed  = exitCode(wait.Failed)
	exitTimeout = exitCode(wait.Timeout)
	exitTrouble = exitCode(wait.Trouble)
)

// waitCommand reads wait's flags and runs internal/wait: it long-polls
// /verdict until the commit's verdict is terminal or the timeout passes,
// prints a summary and exits with the verdict's code.
func waitCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("wait", getenv, stderr)
	base := f.String("url", "FDN_URL", "", "base URL of flux-deploy-notifier")
	rev := f.String("rev", "FDN_REV", "", fmt.Sprintf("the commit: a full revision, a hash or a prefix of %d+ hex digits", flux.MinPrefix))
	tokenFile := f.String("token-file", "FDN_VERDICT_TOKEN_FILE", "", "file holding the verdict token, when the service requires one")
	timeout := f.Duration("timeout", "FDN_TIMEOUT", 15*time.Minute, "how long to wait for a terminal verdict")
	cluster := f.String("cluster", "FDN_WAIT_CLUSTER", "", "the cluster, when the commit deploys to several; a comma list waits on each")
	follow := f.Bool("follow-superseded", "FDN_FOLLOW_SUPERSEDED", false, "when superseded, wait for the newer revision and take its verdict")
	attempts := f.Int("attempts", "FDN_ATTEMPTS", wait.DefaultAttempts, "tries in a row when the service cannot be reached, 1 s apart, doubling")
	output := f.String("output", "FDN_OUTPUT", "text", "text, or json: the final verdicts as JSON on stdout (the rest on stderr)")
	externalURL := f.String("external-url", "FDN_EXTERNAL_URL", "", "the service's URL as people reach it: the CI summary links each rollout's status page")
	gitDir := f.String("git-dir", "FDN_GIT_DIR", "", "the repository holding the commit, to find the later revision it deployed in when it did not deploy on its own (default: the working directory's)")
	noAncestry := f.Bool("no-ancestry", "FDN_NO_ANCESTRY", false, "wait for the commit itself only, never for a later revision that contains it")
	environment := f.String("environment", "FDN_WAIT_ENVIRONMENT", "", "wait on every cluster of this environment (as GET /environments places them)")
	promoteFrom := f.String("promote-from", "FDN_PROMOTE_FROM", "", "the promotion gate: exit 0 once the commit applied on every cluster of this environment and stayed --soak with nothing failing there")
	soak := f.Duration("soak", "FDN_SOAK", 0, "with --promote-from: how long the commit must have been applied, counted from the service's applied time")
	// The commit may come first, as in wait <sha> --promote-from staging.
	var positional string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		positional, args = args[0], args[1:]
	}
	if err := f.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		fmt.Fprintln(stderr, "wait:", err)
		return exitTrouble
	}
	trouble := func(msg ...any) error {
		fmt.Fprintln(stderr, append([]any{"wait:"}, msg...)...)
		return exitTrouble
	}
	if rest := f.Args(); positional == "" && len(rest) == 1 {
		positional = rest[0]
	} else if len(rest) > 0 {
		return trouble("unexpected arguments:", strings.Join(rest, " "))
	}
	switch {
	case positional != "" && *rev != "" && positional != *rev:
		return trouble("the commit is given twice:", positional, "and --rev", *rev)
	case positional != "":
		*rev = positional
	}
	if *base == "" || *rev == "" {
		return trouble("--url and the commit (--rev) are required")
	}
	if n := count(*cluster != "", *environment != "", *promoteFrom != ""); n > 1 {
		return trouble("--cluster, --environment and --promote-from name the clusters: give one")
	}
	if *soak < 0 || *soak > 0 && *promoteFrom == "" {
		return trouble("--soak is a positive duration, with --promote-from")
	}
	if _, _, err := flux.ParseQuery(*rev); err != nil {
		return trouble("--rev:", err)
	}
	var token string
	if *tokenFile != "" {
		var err error
		if token, err = readSecret(*tokenFile); err != nil {
			return trouble(err)
		}
	}
	if *attempts < 1 {
		return trouble("--attempts must be at least 1")
	}
	if *output != "text" && *output != "json" {
		return trouble("--output must be text or json")
	}
	clusters := strings.Split(*cluster, ",")
	for i := range clusters {
		clusters[i] = strings.TrimSpace(clusters[i])
	}
	if len(clusters) > 1 && slices.Contains(clusters, "") {
		return trouble("--cluster: an empty name in the list")
	}
	if env := *environment + *promoteFrom; env != "" {
		var err error
		if clusters, err = wait.EnvironmentClusters(ctx, *base, token, env); err != nil {
			return trouble(err)
		}
	}
	err := wait.Run(ctx, wait.Options{
		URL: *base, Rev: *rev, Token: token, Timeout: *timeout, Clusters: clusters, Follow: *follow,
		Attempts: *attempts, JSON: *output == "json", ExternalURL: *externalURL,
		GitDir: *gitDir, Ancestry: !*noAncestry, Getenv: getenv,
		Gate: *promoteFrom != "", Soak: *soak,
	}, stdout, stderr)
	if c, ok := errors.AsType[wait.Code](err); ok {
		return exitCode(c)
	}
	return err
}

// count is how many of conds hold.
func count(conds ...bool) int {
	n := 0
	for _, c := range conds {
		if c {
			n++
		}
	}
	return n
}
