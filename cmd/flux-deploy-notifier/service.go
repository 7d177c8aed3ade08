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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/blind"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/replica"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/server"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/share"
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
		s.openState,    // the store, bbolt or PostgreSQL, and this replica on it
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
	co                  *store.Coordination // with --postgres: what the replicas share
	// This replica: alone on bbolt, where it always leads, or one of
	// several on PostgreSQL. The engine is its leader's, one each term.
	node      *replica.Node
	onVerdict func(rollout.VerdictChange)

	mailer   *mail.Dispatcher
	channels []shownIn       // the forge, the chats, the webhook configured (channelTable)
	reader   *cluster.Reader // nil: events only
	watchdog *blind.Watchdog // with the reader
	// registered reads the clusters registered as Secrets; nil without the
	// reader, or without permission to list them. remote is how each is
	// read.
	registered *clusters.Registry
	remote     remoteReads
	// sharer shares the registered clusters out among the replicas on
	// PostgreSQL; nil on bbolt, where this process reads them all.
	sharer   *share.Sharer
	identity string // this replica's, in the leases
	srv      *http.Server
	ln       net.Listener
	drain    context.CancelFunc
	debug    func() // stops --debug-listen's server
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

func (s *service) openState(ctx context.Context) error {
	identity := replica.Identity(s.getenv)
	s.identity = identity
	var err error
	if s.c.postgres.enabled() {
		if s.db, s.co, err = s.c.postgres.open(ctx, identity); err == nil {
			s.log.Info("state in PostgreSQL", "identity", identity, "lease", s.c.postgres.leaseTTL.String(), "renew", s.c.postgres.renew.String())
		}
	} else {
		s.db, err = store.Open(s.c.dataDir)
	}
	if err != nil {
		return err
	}
	if err := s.db.SetChannels(s.c.channels.specs()...); err != nil {
		return err
	}
	model, err := rollout.NewModel(s.c.engine)
	if err != nil {
		return err
	}
	cfg := replica.Config{Identity: identity, LeaseTTL: *s.c.postgres.leaseTTL, Renew: *s.c.postgres.renew}
	s.node, err = replica.New(s.db, s.co, cfg, model.Normalise, s.log)
	return err
}

func (s *service) openMail(context.Context) error {
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	if s.mailer, err = s.c.mail.dispatcher(s.db, s.log, s.reg, s.stdout); err != nil {
		return err
	}
	s.onVerdict = api.RegisterMetrics(s.reg, s.node.Reads(), s.db, time.Now)
	s.node.RegisterMetrics(s.reg)
	return nil
}

func (s *service) openChannels(context.Context) error {
	// The readers are made after: the dispatchers ask them only once
	// running. A source is looked up in its rollout's cluster: the
	// service's own, or a registered one while it is read.
	sourceURL := func(cluster, kind, ns, name string) (string, bool) {
		r := s.reader
		if cluster != s.c.engine.DefaultCluster {
			r = s.remote.reader(cluster)
		}
		if r == nil {
			return "", false
		}
		return r.SourceURL(kind, ns, name)
	}
	env := channelEnv{db: s.db, links: s.c.links(sourceURL), sourceURL: sourceURL,
		hc: &http.Client{Timeout: 30 * time.Second}, log: s.log, now: time.Now}
	var err error
	s.channels, err = s.c.channels.dispatchers(env, s.reg)
	return err
}

// wakeChannels tells the dispatcher of every channel that ps were
// published: each wakes only for what it takes, and what of it may go now
// (outbox.Dispatcher.Published).
func (s *service) wakeChannels(ps []rollout.Published) {
	for _, c := range s.channels {
		c.d.Published(ps)
	}
}

func (s *service) watchCluster(ctx context.Context) error {
	statusMoved := func() {
		if s.watchdog != nil {
			s.watchdog.StatusMoved(s.c.engine.DefaultCluster)
		}
	}
	var (
		err error
		cfg *rest.Config
	)
	if s.reader, cfg, err = s.c.cluster.reader(s.getenv, s.node, s.c.engine.DefaultCluster, statusMoved, s.log); err != nil || s.reader == nil {
		return err
	}
	// A missing permission is reported now, not retried in the background.
	accessCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.reader.CheckAccess(accessCtx); err != nil {
		return err
	}
	if s.registered, err = s.c.cluster.registry(ctx, cfg, s.getenv, s.c.engine.DefaultCluster, s.readRegistered, s.log); err != nil {
		return err
	}
	if s.registered != nil && s.co != nil {
		s.sharer = share.New(s.co, s.identity, *s.c.postgres.leaseTTL, *s.c.postgres.renew, s.log, time.Now)
	}
	s.reg.MustRegister(newClusterMetrics(s))
	// Blindness can only be told with cluster access: without it, silence
	// and "no deploys" look the same.
	s.watchdog, err = blind.New(*s.c.cluster.blindAfter, s.c.engine.DefaultCluster, s.reader.Layers, s.db, s.c.mail.to, s.mailer.Wake, s.log, time.Now, s.reg)
	return err
}

// warnings are what people must know of, on /readyz, /rollouts and the
// status pages; none fails readiness (docs/configuration.md, "Health").
func (s *service) warnings() []string {
	sources := []func() string{s.node.StoreWarning, s.mailer.Warning}
	for _, c := range s.channels {
		sources = append(sources, c.d.Warning)
	}
	if s.reader != nil {
		sources = append(sources, s.reader.Warning)
	}
	out := []string{}
	for _, w := range sources {
		if msg := w(); msg != "" {
			out = append(out, msg)
		}
	}
	if s.watchdog != nil {
		out = append(out, s.watchdog.Warnings()...)
	}
	if s.registered != nil {
		out = append(out, s.remote.warnings(s.registered)...)
	}
	return out
}

func (s *service) listen(context.Context) error {
	// Ends when the HTTP server begins shutting down: long polls answer.
	draining, drain := context.WithCancel(context.Background())
	s.drain = drain
	hook := webhook.New(s.token, s.node.Events(), s.log, s.reg)
	checks := []api.Check{{Name: "store", OK: s.node.Answering}}
	if s.reader != nil {
		// The leader's watchdog hears every event: those it accepts (on
		// bbolt, the ones it ignores too), and on PostgreSQL those it takes
		// from the inbox that other replicas accepted. A follower's must not:
		// it would record the last event, a write only the leader may make.
		hook.OnEvent(func(cluster string) {
			if s.node.Leading() {
				s.watchdog.Event(cluster)
			}
		})
		s.node.OnEvent(s.watchdog.Event)
		checks = append(checks, api.Check{Name: "cluster", OK: s.reader.Synced})
	}
	rollouts := s.node.Reads()
	apiSrv := api.New(rollouts, s.log, api.Options{Checks: checks, Warnings: s.warnings, Draining: draining, Role: s.node.Role, Environments: s.placement})
	uiFS, err := fs.Sub(templates.UI, "ui")
	if err != nil {
		return err
	}
	opts := ui.Options{
		Token: s.verdictToken, TrustHeader: s.c.trustHeader, Warnings: s.warnings, Draining: draining, Log: s.log,
		Outbox: func() (int, int, error) { return outboxCounts(s.db) }, Mails: s.db.MailLog,
		Environments: func(source string) (environments.Status, error) {
			resp, err := apiSrv.EnvironmentStatus(source)
			if err != nil {
				return environments.Status{}, err
			}
			return resp.Status, nil
		},
	}
	for _, c := range s.channels {
		opts.Channels = append(opts.Channels, c.ui)
	}
	if s.reader != nil {
		opts.Clusters = s.clusterStates
	}
	if s.co != nil {
		// A session's key derives from the verdict token, the same on
		// every replica; the form's limit is counted where all count.
		opts.Attempts = loginAttempts{s.co}
	}
	pages, err := ui.New(rollouts, uiFS, opts)
	if err != nil {
		return err
	}
	s.srv = server.New(server.Routes(server.Parts{
		Webhook:  hook,
		API:      apiSrv,
		Verdicts: edge.NewAuth(s.verdictToken, "", time.Now),
		UI:       pages,
		Metrics:  promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}),
	}), s.log)
	s.srv.RegisterOnShutdown(drain)
	if s.ln, err = net.Listen("tcp", s.c.listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if s.c.debugListen != "" {
		if s.debug, err = serveDebug(s.c.debugListen); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.stdout, "flux-deploy-notifier listening on http://%s\n", s.ln.Addr())
	state := s.c.dataDir
	if s.co != nil {
		state = "postgres"
	}
	s.log.Info("listening", "addr", s.ln.Addr().String(), "state", state, "layers", len(s.c.engine.Layers),
		"stuck_after", s.c.engine.StuckAfter.String(), "verify_evaluation", s.c.engine.Verify)
	return nil
}

// run starts this replica (its engine and what leads with it), the
// cluster reader and the HTTP server, and stops them in the order that
// loses nothing when ctx ends.
func (s *service) run(ctx context.Context) error {
	nodeCtx, stopNode := context.WithCancel(context.WithoutCancel(ctx))
	nodeDone := make(chan error, 1)
	go func() { nodeDone <- s.node.Run(nodeCtx, s.node.LeadEngine(s.c.engine, time.Now, s.lead)) }()
	select {
	case <-s.node.Serving():
	case err := <-nodeDone: // a replica alone that could not load its state
		stopNode()
		return err
	case <-ctx.Done():
	}
	readerCtx, stopReader := context.WithCancel(context.WithoutCancel(ctx))
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		if s.reader == nil {
			return
		}
		registeredDone := make(chan struct{})
		go func() {
			defer close(registeredDone)
			if s.registered == nil {
				return
			}
			var sharing sync.WaitGroup
			if s.sharer != nil {
				// Stopping, it gives its leases up: the other replicas
				// read its clusters at once.
				sharing.Go(func() { s.sharer.Run(readerCtx) })
			}
			if err := s.registered.Run(readerCtx); err != nil {
				s.log.Error("registered clusters are not read", "err", err)
			}
			sharing.Wait()
		}()
		if err := s.reader.Run(readerCtx); err != nil {
			s.log.Error("cluster reader stopped; serving on events alone", "err", err)
		}
		<-registeredDone
	}()
	serveDone := make(chan error, 1)
	go func() { serveDone <- s.srv.Serve(s.ln) }()

	var err, nodeErr error
	stopped := false
	select {
	case <-ctx.Done():
	case err = <-serveDone:
	case nodeErr = <-nodeDone: // a replica alone whose engine failed
		stopped = true
	}
	// Drain HTTP first: in-flight webhooks are waiting on the engine, and
	// long polls answer once draining ends. Within Kubernetes' grace
	// period with the mail flush: see docs/configuration.md, "Stopping".
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := s.srv.Shutdown(shutdownCtx); serr != nil {
		s.log.Warn("http shutdown", "err", serr)
	}
	// The reader submits to the engine: stop it first. What is left in
	// the outboxes goes out after the next start (or from the next leader).
	stopReader()
	<-readerDone
	stopNode()
	if !stopped {
		nodeErr = <-nodeDone
	}
	s.log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, nodeErr)
}

// close releases what the parts built hold, whether they ran or not.
func (s *service) close() {
	if s.debug != nil {
		s.debug()
	}
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
