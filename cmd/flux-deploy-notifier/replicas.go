package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/replica"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// postgresConfig is serve's PostgreSQL part: the store, and the lease of
// several replicas on it.
type postgresConfig struct {
	conn, passwordFile *string
	leaseTTL, renew    *time.Duration
}

func (c *postgresConfig) flags(f *flags) {
	c.conn = f.String("postgres", "FDN_POSTGRES", "", "PostgreSQL connection, libpq keywords or a postgres:// URL: the state lives there instead of --data-dir, and several replicas may run (docs/architecture.md, \"Several replicas\")")
	c.passwordFile = f.String("postgres-password-file", "FDN_POSTGRES_PASSWORD_FILE", "", "file holding PostgreSQL's password (else libpq's: the connection string, PGPASSWORD, PGPASSFILE)")
	c.leaseTTL = f.Duration("lease-duration", "FDN_LEASE_DURATION", replica.DefaultLeaseTTL, "with --postgres: how long the leader's lease lasts unrenewed (a dead leader's successor takes over within it and --lease-renew)")
	c.renew = f.Duration("lease-renew", "FDN_LEASE_RENEW", replica.DefaultRenew, "with --postgres: how often the leader renews its lease and the other replicas ask for it")
}

func (c *postgresConfig) enabled() bool { return *c.conn != "" }

func (c *postgresConfig) validate() error {
	switch {
	case !c.enabled() && *c.passwordFile != "":
		return errors.New("--postgres-password-file needs --postgres")
	case *c.renew <= 0:
		return errors.New("--lease-renew must be positive")
	case *c.leaseTTL < 2**c.renew:
		return errors.New("--lease-duration must be at least twice --lease-renew")
	}
	return nil
}

// open connects to the database and opens the store in it, its schema
// created or migrated. The connection string is never logged: it may hold
// a password.
func (c *postgresConfig) open(ctx context.Context, application string) (*store.DB, *store.Coordination, error) {
	opt := store.PostgresOptions{Application: application}
	if *c.passwordFile != "" {
		pw, err := readSecret(*c.passwordFile)
		if err != nil {
			return nil, nil, fmt.Errorf("read PostgreSQL's password: %w", err)
		}
		opt.Password = pw
	}
	return store.OpenPostgres(ctx, *c.conn, opt)
}

// lead is what this replica does while it leads, beside its engine: the
// dispatchers and the blindness watchdog, woken by the engine's commits.
func (s *service) lead(e *engine.Engine) []func(context.Context) {
	e.OnMail(s.mailer.Wake)
	e.OnVerdict(s.onVerdict)
	loops := []func(context.Context){func(ctx context.Context) { _ = s.mailer.Run(ctx) }}
	e.OnPublish(s.wakeChannels)
	for _, c := range s.channels {
		loops = append(loops, func(ctx context.Context) { _ = c.d.Run(ctx) })
	}
	if s.watchdog != nil {
		s.watchdog.Begin()
		loops = append(loops, s.watchdog.Run)
		if s.registered != nil {
			loops = append(loops, s.pruneLastEvents)
		}
	}
	return loops
}

// pruneLastEvents deletes the last events kept of clusters no longer
// registered: once the registry has read every Secret (a cluster whose
// Secret went while the service was down), then hourly.
func (s *service) pruneLastEvents(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.registered.Synced():
	}
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		s.watchdog.Prune(s.registered.Registered)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// loginAttempts counts the login form's wrong tokens in PostgreSQL, where
// every replica counts them (ui.Attempts).
type loginAttempts struct{ co *store.Coordination }

func (a loginAttempts) Failures() (int, error) { return a.co.LoginFailures() }
func (a loginAttempts) Failed() error          { return a.co.LoginFailed() }
