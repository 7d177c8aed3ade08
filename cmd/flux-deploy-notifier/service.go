package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/blind"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/replica"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/server"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/webhook"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/templates"
)

// serve runs the service: its parts, built in the order data flows
// through them, then run until ctx ends and stopped in the reverse order.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	s := &service{c: c, getenv: getenv, stdout: stdout, log: newLogger(c, stderr), reg: prometheus.NewRegistry()}
	defer s.close()
	for _, part := range []func(context.Context) error{
		s.loadTokens,   // the webhook's HMAC key and the verdict token
		s.openState,    // bbolt and the engine on it, or PostgreSQL and this replica
		s.openMail,     // the outbox's dispatcher, and the metrics
		s.openChannels, // the dispatchers of the forge, the chats and the webhook configured
		s.watchCluster, // with cluster access: the reader, and the blindness watchdog
		s.listen,       // the webhook, the API, the status pages and /metrics behind one router
	} {
		if err := part(ctx); err != nil {
			return err
		}
	}
	return s.run(ctx)
}

// service is serve's parts.
type service struct {
	c      serveConfig
	getenv func(string) string
	stdout io.Writer
	log    *slog.Logger
	reg    *prometheus.Registry

	token, verdictToken []byte
	db                  *store.DB
	co                  *store.Coordination // with --postgres
	eng                 *engine.Engine      // on bbolt; on PostgreSQL, the leader makes one each term
	// What reads are answered from, what the cluster reader and the
	// webhook hand observations to, and what says the store fails: the
	// engine on bbolt, the replica on PostgreSQL.
	rollouts     reads
	submitter    cluster.Submitter
	events       webhook.Submitter
	storeWarning func() string
	onVerdict    func(rollout.VerdictChange)

	node     *replica.Node // with --postgres
	mailer   *mail.Dispatcher
	channels []shownIn       // the forge, the chats, the webhook configured (channelTable)
	reader   *cluster.Reader // nil: events only
	watchdog *blind.Watchdog // with the reader
	srv      *http.Server
	ln       net.Listener
	drain    context.CancelFunc
}

func (s *service) loadTokens(context.Context) error {
	var err error
	if s.c.tokenFile != "" {
		if s.token, err = loadToken(s.c.tokenFile, s.c.generateToken, s.stdout); err != nil {
			return err
		}
	} else {
		s.log.Warn("serving without authentication: anyone who can reach the webhook can forge deploy verdicts")
	}
	if s.c.verdictToken != "" {
		tok, err := readSecret(s.c.verdictToken)
		if err != nil {
			return fmt.Errorf("read verdict token: %w", err)
		}
		s.verdictToken = []byte(tok)
	}
	return nil
}

// reads are what the API and the pages read rollouts from.
type reads interface {
	api.Rollouts
	ui.Rollouts
}

func (s *service) openState(ctx context.Context) error {
	if s.c.postgres.enabled() {
		return s.openReplica(ctx)
	}
	var err error
	if s.db, err = store.Open(s.c.dataDir); err != nil {
		return err
	}
	if err := s.db.SetChannels(s.c.channels.specs()...); err != nil {
		return err
	}
	if s.eng, err = engine.New(s.db, s.c.engine, s.log, time.Now); err != nil {
		return err
	}
	s.rollouts, s.submitter, s.events, s.storeWarning = s.eng, s.eng, s.eng, s.eng.StoreWarning
	return nil
}

func (s *service) openMail(context.Context) error {
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	if s.mailer, err = s.c.mail.dispatcher(s.db, s.log, s.reg, s.stdout); err != nil {
		return err
	}
	s.onVerdict = api.RegisterMetrics(s.reg, s.rollouts, s.db, time.Now)
	if s.node != nil {
		s.node.RegisterMetrics(s.reg)
		return nil
	}
	s.reg.MustRegister(replica.LeaderGauge(func() bool { return true })) // one process on bbolt always leads
	s.eng.OnMail(s.mailer.Wake)
	s.eng.OnVerdict(s.onVerdict)
	return nil
}

func (s *service) openChannels(context.Context) error {
	// The reader is made after: the dispatchers ask it only once running.
	sourceURL := func(kind, ns, name string) (string, bool) {
		if s.reader == nil {
			return "", false
		}
		return s.reader.SourceURL(kind, ns, name)
	}
	env := channelEnv{db: s.db, links: s.c.links(sourceURL), sourceURL: sourceURL,
		hc: &http.Client{Timeout: 30 * time.Second}, log: s.log, now: time.Now}
	var err error
	if s.channels, err = s.c.channels.dispatchers(env, s.reg); err != nil {
		return err
	}
	if s.eng != nil {
		s.eng.OnPublish(s.wakeChannels)
	}
	return nil
}

// wakeChannels tells the dispatcher of every channel that takes some of
// ps that they were published: a channel that takes no progress is not
// woken by a rollout's layers applying one by one.
func (s *service) wakeChannels(ps []rollout.Published) {
	for _, c := range s.channels {
		if slices.ContainsFunc(ps, c.spec.Takes) {
			c.d.Wake()
		}
	}
}

func (s *service) watchCluster(ctx context.Context) error {
	statusMoved := func() {
		if s.watchdog != nil {
			s.watchdog.StatusMoved()
		}
	}
	var err error
	if s.reader, err = s.c.cluster.reader(s.getenv, s.submitter, s.c.engine.DefaultCluster, statusMoved, s.log); err != nil || s.reader == nil {
		return err
	}
	// A missing permission is reported now, not retried in the background.
	accessCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.reader.CheckAccess(accessCtx); err != nil {
		return err
	}
	// Blindness can only be told with cluster access: without it, silence
	// and "no deploys" look the same.
	s.watchdog, err = blind.New(*s.c.cluster.blindAfter, s.reader.Layers, s.db, s.c.mail.to, s.mailer.Wake, s.log, time.Now, s.reg)
	return err
}

// warnings are what people must know of, on /readyz, /rollouts and the
// status pages; none fails readiness (docs/configuration.md, "Health").
func (s *service) warnings() []string {
	sources := []func() string{s.storeWarning, s.mailer.Warning}
	for _, c := range s.channels {
		sources = append(sources, c.d.Warning)
	}
	if s.reader != nil {
		sources = append(sources, s.watchdog.Warning, s.reader.Warning)
	}
	out := []string{}
	for _, w := range sources {
		if msg := w(); msg != "" {
			out = append(out, msg)
		}
	}
	return out
}

func (s *service) listen(context.Context) error {
	// Ends when the HTTP server begins shutting down: long polls answer.
	draining, drain := context.WithCancel(context.Background())
	s.drain = drain
	hook := webhook.New(s.token, s.events, s.log, s.reg)
	var checks []api.Check
	if s.reader != nil {
		if s.node != nil {
			s.node.OnEvent(s.watchdog.Event) // the leader's, as it takes each event from the inbox
		} else {
			hook.OnEvent(s.watchdog.Event)
		}
		checks = append(checks, api.Check{Name: "cluster", OK: s.reader.Synced})
	}
	apiOpts := api.Options{Checks: checks, Warnings: s.warnings, Draining: draining}
	if s.node != nil {
		apiOpts.Checks = append(apiOpts.Checks, api.Check{Name: "postgres", OK: s.node.Answering})
		apiOpts.Role = s.node.Role
	}
	uiFS, err := fs.Sub(templates.UI, "ui")
	if err != nil {
		return err
	}
	opts := ui.Options{
		Token: s.verdictToken, TrustHeader: s.c.trustHeader, Warnings: s.warnings, Draining: draining, Log: s.log,
		Outbox: func() (int, int, error) { return outboxCounts(s.db) }, Mails: s.db.MailLog,
	}
	for _, c := range s.channels {
		opts.Channels = append(opts.Channels, c.ui)
	}
	if s.node != nil {
		// A session's key derives from the verdict token, the same on
		// every replica; the form's limit is counted where all count.
		opts.Attempts = loginAttempts{s.co}
	}
	pages, err := ui.New(s.rollouts, uiFS, opts)
	if err != nil {
		return err
	}
	s.srv = server.New(server.Routes(server.Parts{
		Webhook:  hook,
		API:      api.New(s.rollouts, s.log, apiOpts),
		Verdicts: edge.NewAuth(s.verdictToken, "", time.Now),
		UI:       pages,
		Metrics:  promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}),
	}), s.log)
	s.srv.RegisterOnShutdown(drain)
	if s.ln, err = net.Listen("tcp", s.c.listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(s.stdout, "flux-deploy-notifier listening on http://%s\n", s.ln.Addr())
	state := s.c.dataDir
	if s.node != nil {
		state = "postgres"
	}
	s.log.Info("listening", "addr", s.ln.Addr().String(), "state", state, "layers", len(s.c.engine.Layers),
		"stuck_after", s.c.engine.StuckAfter.String(), "verify_evaluation", s.c.engine.Verify)
	return nil
}

// run starts the engine, the cluster reader, the mailer and the HTTP
// server, and stops them in the order that loses nothing when ctx ends.
func (s *service) run(ctx context.Context) error {
	// On bbolt the engine runs; on PostgreSQL this replica follows, and
	// runs the engine and what else leads while it leads.
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engineDone := make(chan error, 1)
	if s.node != nil {
		go func() { engineDone <- s.node.Run(engineCtx, s.node.LeadEngine(s.c.engine, time.Now, s.lead)) }()
	} else {
		go func() { engineDone <- s.eng.Run(engineCtx) }()
	}
	readerCtx, stopReader := context.WithCancel(context.WithoutCancel(ctx))
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		if s.reader == nil {
			return
		}
		// Awaited with the reader, so that it never writes to a closed store.
		var wg sync.WaitGroup
		if s.node == nil { // on PostgreSQL, the leader's
			wg.Go(func() { s.watchdog.Run(readerCtx) })
		}
		if err := s.reader.Run(readerCtx); err != nil {
			s.log.Error("cluster reader stopped; serving on events alone", "err", err)
		}
		wg.Wait()
	}()
	mailCtx, stopMail := context.WithCancel(context.WithoutCancel(ctx))
	// The dispatchers: on PostgreSQL, the leader's.
	var dispatchers sync.WaitGroup
	if s.node == nil {
		dispatchers.Go(func() { _ = s.mailer.Run(mailCtx) })
		for _, c := range s.channels {
			dispatchers.Go(func() { _ = c.d.Run(mailCtx) })
		}
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- s.srv.Serve(s.ln) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveDone:
	}
	// Drain HTTP first: in-flight webhooks are waiting on the engine, and
	// long polls answer once draining ends. Within Kubernetes' grace
	// period with the mail flush: see docs/configuration.md, "Stopping".
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := s.srv.Shutdown(shutdownCtx); serr != nil {
		s.log.Warn("http shutdown", "err", serr)
	}
	// The reader submits to the engine: stop it first.
	stopReader()
	<-readerDone
	stopEngine()
	<-engineDone
	// What is left in the outbox goes out after the next start.
	stopMail()
	dispatchers.Wait()
	s.log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// close releases what the parts built hold, whether they ran or not.
func (s *service) close() {
	if s.drain != nil {
		s.drain()
	}
	if s.ln != nil {
		s.ln.Close() // never served when a later part failed; closed again after Serve is harmless
	}
	if s.db != nil {
		s.db.Close()
	}
}
