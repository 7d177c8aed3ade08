package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

type serveConfig struct {
	listen         string
	dataDir        string
	tokenFile      string
	generateToken  bool
	insecureNoAuth bool
	engine         rollout.Config
	logLevel       slog.Level
	logFormat      string
	mail           mailConfig
	channels       channelsConfig // the forge, the chats, the webhook
	cluster        clusterConfig
	postgres       postgresConfig
	verdictToken   string
	trustHeader    string
	debugListen    string // Go's profiles on loopback; empty: off
	environments   []environments.Declared
}

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	f := newFlags("serve", getenv, stderr)
	var c serveConfig
	listen := f.String("listen", "FDN_LISTEN", "127.0.0.1:8080", "address to serve the webhook and API on")
	dataDir := f.String("data-dir", "FDN_DATA_DIR", "./data", "directory of the state database")
	tokenFile := f.String("hmac-token-file", "FDN_HMAC_TOKEN_FILE", "", "file holding the token of the Provider Secret: HMAC key (generic-hmac) and Bearer token (generic)")
	generate := f.Bool("generate-token", "FDN_GENERATE_TOKEN", false, "create --hmac-token-file with a random token when it does not exist (development)")
	verdictToken := f.String("verdict-token-file", "FDN_VERDICT_TOKEN_FILE", "", "file holding a token /verdict, /rollouts and the status pages then require as Authorization: Bearer (pages: or a login)")
	trustHeader := f.String("trust-auth-header", "FDN_TRUST_AUTH_HEADER", "", "a header an authenticating proxy sets (X-Auth-Request-Email): the status pages let in requests that carry it")
	insecure := f.Bool("insecure-no-auth", "FDN_INSECURE_NO_AUTH", false, "accept unauthenticated events when no token file is given")
	layers := f.String("layers", "FDN_LAYERS", "", "Kustomizations every rollout must reach, as namespace/name,namespace/name")
	stuck := f.Duration("stuck-after", "FDN_STUCK_AFTER", 30*time.Minute, "time from a revision's first evidence after which it is stuck")
	retention := f.Duration("retention", "FDN_RETENTION", 720*time.Hour, "how long rollouts are kept after their last evidence")
	settleAfter := f.Duration("settle-after", "FDN_SETTLE_AFTER", rollout.DefaultSettleAfter, "quiet time after which a final rollout whose layers all moved on leaves memory for the archive on disk")
	cluster := f.String("default-cluster", "FDN_DEFAULT_CLUSTER", "default", "cluster name of events without metadata.cluster")
	envs := f.String("environments", "FDN_ENVIRONMENTS", "", "environments in promotion order, each with its clusters: staging=stg-eu,stg-us;prod=prod-eu,prod-us (a cluster Secret's "+clusters.EnvironmentLabel+" label places its cluster)")
	var mc mailConfig
	mc.flags(f)
	var cc clusterConfig
	cc.flags(f)
	var chc channelsConfig
	chc.flags(f)
	var pc postgresConfig
	pc.flags(f)
	level := f.String("log-level", "FDN_LOG_LEVEL", "info", "debug, info, warn or error")
	format := f.String("log-format", "FDN_LOG_FORMAT", "json", "json or text")
	debug := f.String("debug-listen", "FDN_DEBUG_LISTEN", "", "loopback address serving the Go runtime's profiles (/debug/pprof/); off unless given")
	if err := f.parse(args); err != nil {
		return c, err
	}
	c = serveConfig{
		listen: *listen, dataDir: *dataDir, tokenFile: *tokenFile, generateToken: *generate,
		insecureNoAuth: *insecure, logFormat: *format,
		engine: rollout.Config{StuckAfter: *stuck, Retention: *retention, SettleAfter: *settleAfter, DefaultCluster: *cluster, Verify: verifyEvaluation,
			ClassOf: ingest.FailureClass, RoleOf: ingest.RoleOf, CommitOf: flux.GitCommit},
		mail:     mc,
		channels: chc,
		cluster:  cc, postgres: pc, verdictToken: *verdictToken, trustHeader: *trustHeader,
		debugListen: *debug,
	}
	if err := checkDebugListen(c.debugListen); err != nil {
		return c, err
	}
	var err error
	if c.environments, err = environments.Parse(*envs); err != nil {
		return c, fmt.Errorf("--%w", err)
	}
	if err := c.cluster.validate(); err != nil {
		return c, err
	}
	if err := c.postgres.validate(); err != nil {
		return c, err
	}
	if c.postgres.enabled() && *c.mail.smtpAddr == "" && *c.mail.dir == "" {
		// The .eml fallback is one directory of one process; replicas have
		// no volume of their own to share.
		return c, errors.New("with --postgres, mails need --smtp-addr (or --mail-dir, where the leader of the moment writes them)")
	}
	if err := c.mail.finish(*dataDir); err != nil {
		return c, err
	}
	c.engine.MailTo = c.mail.to
	if err := c.channels.finish(); err != nil {
		return c, err
	}
	c.engine.Publish = len(c.channels.specs()) > 0
	for _, ch := range c.channels.specs() {
		c.engine.Progress = c.engine.Progress || ch.Progress
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("--log-level: %w", err)
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		return c, fmt.Errorf("--log-format must be json or text, not %q", c.logFormat)
	}
	if *stuck <= 0 {
		return c, errors.New("--stuck-after must be positive")
	}
	if *retention < *stuck {
		return c, errors.New("--retention must be at least --stuck-after")
	}
	if *settleAfter <= 0 {
		return c, errors.New("--settle-after must be positive")
	}
	if c.tokenFile == "" && !c.insecureNoAuth {
		return c, errors.New("--hmac-token-file is required (or --insecure-no-auth to accept unauthenticated events)")
	}
	if c.generateToken && c.tokenFile == "" {
		return c, errors.New("--generate-token needs --hmac-token-file")
	}
	for _, l := range strings.Split(*layers, ",") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		ns, name, ok := strings.Cut(l, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return c, fmt.Errorf("--layers: %q is not namespace/name", l)
		}
		c.engine.Layers = append(c.engine.Layers, ingest.Layer(ns, name))
	}
	return c, nil
}

func newLogger(c serveConfig, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.logLevel}
	if c.logFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// loadToken reads the token as exact bytes: notification-controller keys
// the HMAC with the Secret's bytes, trailing newline included.
func loadToken(path string, generate bool, stdout io.Writer) ([]byte, error) {
	tok, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && generate {
		raw := make([]byte, 24)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		tok = []byte(hex.EncodeToString(raw))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, tok, 0o600); err != nil {
			return nil, fmt.Errorf("write token: %w", err)
		}
		// Printed once, to the terminal of the person who ran make run,
		// never to the log.
		fmt.Fprintf(stdout, "generated a development token in %s: %s\n", path, tok)
		fmt.Fprintf(stdout, "post a sample rollout with: make sample   (or: flux-deploy-notifier sample --token-file %s)\n", path)
		return tok, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read token: %w", err)
	}
	if len(tok) == 0 {
		return nil, fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// outboxCounts is how many mails wait in the outbox and how many were
// dead-lettered, for the status page.
func outboxCounts(db *store.DB) (int, int, error) {
	pending, err := db.Pending()
	if err != nil {
		return 0, 0, err
	}
	dead, err := db.Dead()
	return len(pending), len(dead), err
}
