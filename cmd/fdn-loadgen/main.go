// Command fdn-loadgen measures ingest: it posts signed, distinct, realistic
// Flux events over loopback with keep-alive to the real webhook stack
// (HMAC, decode, engine, bbolt group commit) and, in the same run, to a
// bare net/http handler that only reads and decodes the same JSON. Figures
// are ratios against that baseline, so a noisy machine slows both.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/procstat"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/replica"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	router "github.com/flux-deploy-notifier/flux-deploy-notifier/internal/server"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/webhook"
)

func main() { loadkit.Main("fdn-loadgen", run) }

type config struct {
	duration    time.Duration
	concurrency int
	rate        int
	rateFor     time.Duration
	rounds      int
}

// arrivals is how many events a paced run sends, and how far apart.
func (c config) arrivals() (total int, interval time.Duration) {
	return int(float64(c.rate) * c.rateFor.Seconds()), time.Second / time.Duration(c.rate)
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fdn-loadgen", flag.ContinueOnError)
	var c config
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long each saturation run lasts")
	fs.IntVar(&c.concurrency, "concurrency", 64, "concurrent connections in saturation runs")
	fs.IntVar(&c.rate, "rate", 1000, "events per second of the latency run")
	fs.DurationVar(&c.rateFor, "rate-duration", 5*time.Second, "how long the latency run lasts")
	fs.IntVar(&c.rounds, "rounds", 5, "slices each run is cut into, the sides of a comparison taking turns")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the service to this file")
	serve := fs.String("serve", "", "internal: serve bare, service or replica and print the address")
	conn := fs.String("conn", "", "internal: the replica's PostgreSQL database")
	withPostgres := fs.Bool("postgres", true, "also measure the PostgreSQL store (a server of Debian's postgresql package, started for the run)")
	onlyPostgres := fs.Bool("only-postgres", false, "measure the PostgreSQL store alone (against bbolt and the bare handler)")
	reference := fs.String("reference", "", "also run the reference load stream: this fdnload binary, against -binary's serve")
	binary := fs.String("binary", "bin/flux-deploy-notifier", "the service's binary, for -reference")
	onlyReference := fs.Bool("only-reference", false, "run the reference stream alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *onlyReference {
		return withReference(*reference, *binary, *withPostgres, out)
	}
	if c.rounds < 1 || c.concurrency < 2 || c.rate < 1 {
		return errors.New("-rounds and -rate must be at least 1, -concurrency at least 2")
	}
	token := []byte("loadgen-token")
	if *serve != "" {
		return serveChild(*serve, *conn, token, *cpuProfile, out)
	}
	if err := ownRuns(c, token, *cpuProfile, *withPostgres, *onlyPostgres, out); err != nil || *reference == "" {
		return err
	}
	// After this program's own runs, their servers stopped: alone on the
	// machine as they were.
	return withReference(*reference, *binary, *withPostgres, out)
}

// ownRuns are this program's own measurements, its stream against its
// servers (the engine and webhook, the replica) and the bare handler.
func ownRuns(c config, token []byte, cpuProfile string, withPostgres, onlyPostgres bool, out io.Writer) error {
	// Each server runs in its own process, as the service does in a
	// cluster: the load generator's goroutines do not share its scheduler.
	bare, err := spawn("bare", "", "")
	if err != nil {
		return err
	}
	defer bare.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.concurrency * 2, MaxConnsPerHost: c.concurrency * 2}}
	// Enough distinct events for the longest run at a generous rate.
	n := int(max(c.duration.Seconds(), c.rateFor.Seconds()) * 40000)
	if onlyPostgres {
		return postgresRuns(client, bare, token, n, c, out)
	}
	svc, err := spawn("service", cpuProfile, "")
	if err != nil {
		return err
	}
	defer func() { svc.stop() }()

	events := newEvents(token, n, 20)

	rates, err := saturate(client, []target{{"bare handler", bare, events}, {"service", svc, events}}, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "bare handler (read + decode): %.0f events/s\n", rates[0])
	fmt.Fprintf(out, "service (HMAC, decode, engine, bbolt commit before 202): %.0f events/s\n", rates[1])
	lat, err := paced(client, svc, bare, events, c)
	if err != nil {
		return fmt.Errorf("paced: %w", err)
	}
	fmt.Fprintf(out, "ack latency at %d events/s: %v\n", c.rate, lat)
	fmt.Fprintf(out, "ingest: %.0f events/s durable, %.2f of bare handler, ack p99 %.2f ms at %d events/s (%s)\n",
		rates[1], rates[1]/rates[0], ms(lat.p99), c.rate, lat.floors())

	// The same at half the connections, fewer requests per group commit,
	// on a fresh service: the same start as the run above, and its own
	// supply of distinct events.
	half := c
	half.concurrency = c.concurrency / 2
	svc.stop()
	if svc, err = spawn("service", "", ""); err != nil {
		return err
	}
	if rates, err = saturate(client, []target{{"bare handler", bare, events}, {"service", svc, events}}, half); err != nil {
		return err
	}
	fmt.Fprintf(out, "ingest at %d connections: %.0f events/s durable, %.2f of bare handler (%.0f events/s)\n",
		half.concurrency, rates[1], rates[1]/rates[0], rates[0])

	// Width: revisions rolling across 50 and 1,000 layers, each on a fresh
	// service, at half the connections; then the ack latency at 1,000.
	narrow, err := spawn("service", "", "")
	if err != nil {
		return err
	}
	defer narrow.stop()
	wide, err := spawn("service", "", "")
	if err != nil {
		return err
	}
	defer wide.stop()
	wideEvents := newEvents(token, n, 1000)
	if rates, err = saturate(client, []target{{"width 50", narrow, newEvents(token, n, 50)}, {"width 1000", wide, wideEvents}}, half); err != nil {
		return err
	}
	narrow.stop()
	wideLat, err := paced(client, wide, bare, wideEvents, c)
	if err != nil {
		return fmt.Errorf("width 1000: %w", err)
	}
	fmt.Fprintf(out, "width: %.0f events/s at 50 layers a revision, %.0f at 1000 (%.2f of it), ack p99 %.2f ms at %d events/s with 1000 (%s)\n",
		rates[0], rates[1], rates[1]/rates[0], ms(wideLat.p99), c.rate, wideLat.floors())
	if !withPostgres {
		return nil
	}
	return postgresRuns(client, bare, token, n, c, out)
}

// postgresRuns measures the PostgreSQL store against bbolt and the bare
// handler in the same run: durable ingest at 32 connections, the ack's
// latency at c.rate with 20 and 1,000 layers a revision, and how soon an
// event acknowledged by one replica shows on another.
func postgresRuns(client *http.Client, bare *server, token []byte, n int, c config, out io.Writer) error {
	pg, err := pgtest.Launch()
	if err != nil {
		return fmt.Errorf("start PostgreSQL (make postgres installs it; -postgres=false skips these runs): %w", err)
	}
	defer pg.Close()
	replicaOn := func() (*server, error) {
		conn, err := pg.CreateDatabase()
		if err != nil {
			return nil, err
		}
		return spawn("replica", "", conn)
	}
	svc, err := spawn("service", "", "")
	if err != nil {
		return err
	}
	defer svc.stop()
	rep, err := replicaOn()
	if err != nil {
		return err
	}
	defer rep.stop()
	events := newEvents(token, n, 20)
	at32 := c
	at32.concurrency = 32
	rates, err := saturate(client, []target{{"bare handler", bare, events}, {"bbolt", svc, events}, {"postgres", rep, events}}, at32)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "postgres at 32 connections: %.0f events/s durable, %.2f of bbolt's (%.0f), %.2f of bare handler (%.0f)\n",
		rates[2], rates[2]/rates[1], rates[1], rates[2]/rates[0], rates[0])
	rep.stop()
	if rep, err = replicaOn(); err != nil {
		return err
	}
	lat, err := paced(client, rep, bare, events, c)
	if err != nil {
		return fmt.Errorf("postgres paced: %w", err)
	}
	fmt.Fprintf(out, "postgres ack latency at %d events/s: %v\n", c.rate, lat)
	rep.stop()
	wide, err := replicaOn()
	if err != nil {
		return err
	}
	defer wide.stop()
	wideLat, err := paced(client, wide, bare, newEvents(token, n, 1000), c)
	if err != nil {
		return fmt.Errorf("postgres width 1000: %w", err)
	}
	fmt.Fprintf(out, "postgres width: ack p99 %.2f ms at %d events/s with 1000 layers a revision (%s)\n", ms(wideLat.p99), c.rate, wideLat.floors())
	wide.stop()
	return visibility(client, pg, token, c, out)
}

// cpuTime is the user and system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// server is a child process serving one target.
type server struct {
	url     string
	pid     int
	repeats bool // takes events again: it only decodes them
	stop    func()
}

// cpu is the CPU time the server has used so far, from /proc.
func (s *server) cpu() time.Duration { return procstat.CPU(s.pid) }

// spawn starts this program as a server of the given kind; stop ends it
// (by its PID, the only process it ever kills).
func spawn(kind, cpuProfile, conn string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-serve", kind, "-cpuprofile", cpuProfile, "-conn", conn)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := sync.OnceFunc(func() {
		stdin.Close() // asks the child to finish and report
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return nil, fmt.Errorf("%s server: %w", kind, err)
	}
	url := strings.TrimSpace(line)
	if kind != "bare" {
		url += "/webhook"
	}
	return &server{url: url, pid: cmd.Process.Pid, repeats: kind == "bare", stop: stop}, nil
}

// serveChild serves until its stdin closes, then reports its CPU use.
func serveChild(kind, conn string, token []byte, cpuProfile string, out io.Writer) error {
	var (
		url  string
		stop func()
		err  error
	)
	switch kind {
	case "bare":
		url, stop, err = serveBare()
	case "service":
		url, stop, err = serveService(token)
	case "replica":
		url, stop, err = serveReplica(token, conn)
	default:
		return fmt.Errorf("unknown server %q", kind)
	}
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintln(out, url)
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	return nil
}

func serveBare() (string, func(), error) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev flux.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	return listen(h)
}

func serveService(token []byte) (string, func(), error) {
	dir, err := os.MkdirTemp("", "fdn-loadgen-")
	if err != nil {
		return "", nil, err
	}
	db, err := store.Open(dir)
	if err != nil {
		return "", nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(db, rollout.Config{StuckAfter: 24 * time.Hour, Retention: 720 * time.Hour}, log, time.Now)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	reg := prometheus.NewRegistry()
	url, stop, err := listen(router.Routes(router.Parts{Webhook: webhook.New(token, e, log, reg), API: api.New(e, log, api.Options{})}))
	if err != nil {
		cancel()
		return "", nil, err
	}
	return url, func() {
		stop()
		cancel()
		<-done
		st := e.Stats()
		fmt.Fprintf(os.Stderr, "engine: %d observations in %d commits\n", st.Observations.Load(), st.Commits.Load())
		db.Close()
		os.RemoveAll(dir)
	}, nil
}

// serveReplica serves a replica on the PostgreSQL database conn, as serve
// --postgres does: events into the inbox, reads from the views it
// follows, the engine while it leads.
func serveReplica(token []byte, conn string) (string, func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	db, co, err := store.OpenPostgres(ctx, conn, store.PostgresOptions{})
	if err != nil {
		cancel()
		return "", nil, err
	}
	cfg := rollout.Config{StuckAfter: 24 * time.Hour, Retention: 720 * time.Hour}
	model, err := rollout.NewModel(cfg)
	if err != nil {
		cancel()
		return "", nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := replica.New(db, co, replica.Config{Identity: replica.Identity(os.Getenv)}, model.Normalise, log)
	if err != nil {
		cancel()
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx, n.LeadEngine(cfg, time.Now, nil)) }()
	for deadline := time.Now().Add(30 * time.Second); !n.CaughtUp(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			return "", nil, errors.New("the replica never caught up")
		}
	}
	reg := prometheus.NewRegistry()
	url, stop, err := listen(router.Routes(router.Parts{Webhook: webhook.New(token, n.Events(), log, reg), API: api.New(n.Reads(), log, api.Options{})}))
	if err != nil {
		cancel()
		return "", nil, err
	}
	return url, func() {
		stop()
		cancel()
		<-done
		db.Close()
	}, nil
}

func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

type event = loadkit.Event

// events is a shared supply: each index is used once per target, so every
// event the service sees is distinct. The bare handler only decodes, so it
// goes round the list again: on a quiet machine it reads more in one run
// than the list holds, and a run that ran dry would report a rate it did
// not measure.
type events struct {
	list []event
	next map[string]*atomic.Int64
	mu   sync.Mutex
}

func (e *events) take(srv *server) (event, bool) {
	e.mu.Lock()
	n := e.next[srv.url]
	if n == nil {
		n = new(atomic.Int64)
		e.next[srv.url] = n
	}
	e.mu.Unlock()
	i := n.Add(1) - 1
	switch {
	case srv.repeats:
		i %= int64(len(e.list))
	case i >= int64(len(e.list)):
		return event{}, false
	}
	return e.list[i], true
}

// newEvents builds what a busy cluster sends: width layers moving through
// revisions, each layer emitting DependencyNotReady, Progressing with
// change lines, a health check and ReconciliationSucceeded.
func newEvents(token []byte, n, width int) *events {
	t0 := time.Now().UTC().Add(-time.Hour)
	out := make([]event, 0, n)
	for rev := 0; len(out) < n; rev++ {
		sum := sha1.Sum(fmt.Appendf(nil, "load-%d", rev))
		revision := "main@sha1:" + hex.EncodeToString(sum[:])
		for l := 0; l < width && len(out) < n; l++ {
			name := fmt.Sprintf("tenant-%04d", l)
			for k, step := range [][2]string{
				{"DependencyNotReady", "Dependencies do not meet ready condition, retrying in 30s"},
				{"Progressing", fmt.Sprintf("Deployment/%s/web configured\nService/%s/web unchanged\nConfigMap/%s/settings-%d created", name, name, name, rev)},
				{"Progressing", "Health check passed in 2.04s"},
				{"ReconciliationSucceeded", "Reconciliation finished in 2.31s, next run in 10m0s"},
			} {
				out = append(out, loadkit.Signed(token, flux.Event{
					InvolvedObject: flux.ObjectRef{Kind: "Kustomization", Namespace: "flux-system", Name: name,
						UID: "7d0cdc51-ddcf-4743-b223-83ca5c699632", APIVersion: "kustomize.toolkit.fluxcd.io/v1", ResourceVersion: "123456"},
					Severity:            "info",
					Timestamp:           t0.Add(time.Duration(rev*60+l/10+k) * time.Second).Format(time.RFC3339),
					Message:             step[1],
					Reason:              step[0],
					Metadata:            map[string]string{"revision": revision, "cluster": "prod"},
					ReportingController: "kustomize-controller",
					ReportingInstance:   "kustomize-controller-7c7b47f5f-8bhrp",
				}))
			}
		}
	}
	return &events{list: out[:n], next: map[string]*atomic.Int64{}}
}

// post posts ev and fails unless the service acknowledged it.
func post(client *http.Client, url string, ev event) error {
	status, err := loadkit.Post(client, url, ev)
	if err == nil && status != http.StatusAccepted {
		err = fmt.Errorf("status %d", status)
	}
	return err
}

// errDry is a run that used every distinct event before its end.
var errDry = errors.New("ran out of distinct events before the run's end")

// target is one side of a comparison: a server and the events it takes.
type target struct {
	name string
	srv  *server
	evs  *events
}

// saturate posts to the targets in turn, c.rounds slices of
// c.duration/c.rounds each from c.concurrency connections, and returns
// each target's events acknowledged per second over its slices. Taking
// turns puts the machine's slow spells on every side of a ratio: run
// whole, one after the other, a spell of slow fdatasyncs that began
// between two runs halved a ratio (the width's 0.50 of 2026-12-03, its
// 1,000-layer side waiting on the disk with its cores 0.6 busy).
func saturate(client *http.Client, targets []target, c config) ([]float64, error) {
	type tally struct {
		events          int64
		spent, srv, gen time.Duration
		ticks           procstat.Ticks
	}
	tallies := make([]tally, len(targets))
	slice := c.duration / time.Duration(c.rounds)
	for range c.rounds {
		for i, t := range targets {
			start, srv0, gen0 := time.Now(), t.srv.cpu(), cpuTime()
			ticks0 := procstat.Read()
			n, err := postUntil(client, t, c.concurrency, start.Add(slice))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.name, err)
			}
			tl := &tallies[i]
			tl.events += n
			tl.spent += time.Since(start)
			tl.srv += t.srv.cpu() - srv0
			tl.gen += cpuTime() - gen0
			tl.ticks = tl.ticks.Add(procstat.Read().Since(ticks0))
		}
	}
	rates := make([]float64, len(targets))
	for i, tl := range tallies {
		rates[i] = float64(tl.events) / tl.spent.Seconds()
		fmt.Fprintf(os.Stderr, "  (%s, cores busy: server %.2f, load generator %.2f; CPU stolen %.0f%%)\n",
			targets[i].name, tl.srv.Seconds()/tl.spent.Seconds(), tl.gen.Seconds()/tl.spent.Seconds(),
			100*tl.ticks.Stolen())
	}
	return rates, nil
}

// postUntil posts t's events from conns connections until stop and returns
// how many were acknowledged.
func postUntil(client *http.Client, t target, conns int, stop time.Time) (int64, error) {
	var (
		n        atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	for range conns {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ev, ok := t.evs.take(t.srv)
				if !ok {
					errOnce.Do(func() { firstErr = errDry })
					return
				}
				if err := post(client, t.srv.url, ev); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return n.Load(), firstErr
}

// latency is a paced run's time to acknowledgement and, measured in turns
// with it at the same rate, the two floors under it: the disk's
// (diskLatency) and the HTTP round trip's, the bare handler's at that rate.
// cpu is the machine's CPU time while the service was timed, and what its
// hypervisor stole of it.
type latency struct {
	p50, p99, diskP50, diskP99, httpP50, httpP99 time.Duration
	cpu                                          procstat.Ticks
}

func (l latency) String() string {
	return fmt.Sprintf("p50 %.2f ms, p99 %.2f ms (the disk alone at that rate: p50 %.2f, p99 %.2f; HTTP alone: p50 %.2f, p99 %.2f; CPU stolen %.0f%%)",
		ms(l.p50), ms(l.p99), ms(l.diskP50), ms(l.diskP99), ms(l.httpP50), ms(l.httpP99), 100*l.cpu.Stolen())
}

// floors is the summary lines' note of the two floors' p99s.
func (l latency) floors() string {
	return fmt.Sprintf("disk alone %.2f, HTTP alone %.2f, CPU stolen %.0f%%", ms(l.diskP99), ms(l.httpP99), 100*l.cpu.Stolen())
}

// paced measures the service's time to acknowledgement at c.rate events
// per second, and its two floors, in turns: c.rounds rounds of the disk
// alone, HTTP alone and the service, each c.rateFor/c.rounds long, so that
// the floors describe the same minutes as the service's figure.
func paced(client *http.Client, svc, bare *server, evs *events, c config) (latency, error) {
	// The saturation run before this one leaves tens of megabytes of dirty
	// pages; their writeback, started by the kernel in the middle of this
	// run, would queue every fsync of the service behind it. Flush them
	// first, so that the latency is the service's at this rate.
	syscall.Sync()
	round := c
	round.rateFor = c.rateFor / time.Duration(c.rounds)
	var disk, wire, acks []time.Duration
	var l latency
	for range c.rounds {
		lat, err := diskLatency(os.TempDir(), round)
		if err != nil {
			return latency{}, err
		}
		disk = append(disk, lat...)
		if lat, err = send(client, bare, evs, round); err != nil {
			return latency{}, fmt.Errorf("bare handler: %w", err)
		}
		wire = append(wire, lat...)
		ticks0 := procstat.Read()
		if lat, err = send(client, svc, evs, round); err != nil {
			return latency{}, err
		}
		acks = append(acks, lat...)
		l.cpu = l.cpu.Add(procstat.Read().Since(ticks0))
	}
	l.diskP50, l.diskP99 = percentiles(disk)
	l.httpP50, l.httpP99 = percentiles(wire)
	l.p50, l.p99 = percentiles(acks)
	return l, nil
}

// send posts at c.rate events per second (open loop: a slow answer does
// not slow the sender) and returns each one's time to acknowledgement.
func send(client *http.Client, srv *server, evs *events, c config) ([]time.Duration, error) {
	url := srv.url
	total, interval := c.arrivals()
	lat := make([]time.Duration, total)
	errs := make(chan error, total)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		ev, ok := evs.take(srv)
		if !ok {
			wg.Wait()
			return nil, errDry
		}
		wg.Go(func() {
			t := time.Now()
			if err := post(client, url, ev); err != nil {
				errs <- err
				return
			}
			lat[i] = time.Since(t)
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return lat, nil
}

// diskLatency is the floor under the ack latency at the paced run's rate:
// an ideal group commit (groupCommit) with nothing but the disk, no HTTP
// and no engine. Each commit writes one page into a preallocated file, as
// the service's log is, and fdatasyncs it.
func diskLatency(dir string, c config) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "fdn-loadgen-disk-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const page = 4096
	total, interval := c.arrivals()
	if _, err := f.Write(make([]byte, total*page)); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	buf := bytes.Repeat([]byte{1}, 1024)
	return groupCommit(total, interval, func(i int) error {
		if _, err := f.WriteAt(buf, int64(i)*page); err != nil {
			return err
		}
		return syscall.Fdatasync(int(f.Fd()))
	})
}

// groupCommit returns the time to acknowledgement of total arrivals, one
// every interval, when each is answered at the end of the first commit
// (the i-th call of commit) begun after it: a stall delays every arrival
// behind it, as in the service.
func groupCommit(total int, interval time.Duration, commit func(i int) error) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, total)
	start := time.Now()
	arrival := func(i int) time.Time { return start.Add(time.Duration(i) * interval) }
	for next, i := 0, 0; next < total; i++ {
		// An arrival waited for is timed from the wake-up, as the load
		// generator times a request from its send, not from its schedule.
		first := arrival(next)
		if d := time.Until(first); d > 0 {
			time.Sleep(d)
			first = time.Now()
		}
		began := time.Now()
		if err := commit(i); err != nil {
			return nil, err
		}
		done := time.Now()
		lat = append(lat, done.Sub(first))
		for next++; next < total && !arrival(next).After(began); next++ {
			lat = append(lat, done.Sub(arrival(next)))
		}
	}
	return lat, nil
}

func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// visibility runs two replicas on one database and posts to the one that
// does not lead, paced at c.rate: each event goes through the inbox to the
// leader's engine and back as a view. For a sample of the successes it
// measures the time from the 202 until the same replica's /verdict shows
// the layer applied.
func visibility(client *http.Client, pg *pgtest.Server, token []byte, c config, out io.Writer) error {
	conn, err := pg.CreateDatabase()
	if err != nil {
		return err
	}
	leader, err := spawn("replica", "", conn)
	if err != nil {
		return err
	}
	defer leader.stop()
	follower, err := spawn("replica", "", conn)
	if err != nil {
		return err
	}
	defer follower.stop()
	total, interval := c.arrivals()
	evs := newEvents(token, total, 20)
	base := strings.TrimSuffix(follower.url, "/webhook")
	var (
		mu      sync.Mutex
		delays  []time.Duration
		missing int
		wg      sync.WaitGroup
	)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range total {
		<-tick.C
		ev := evs.list[i]
		var fe flux.Event
		if err := json.Unmarshal(ev.Body, &fe); err != nil {
			return err
		}
		sample := fe.Reason == "ReconciliationSucceeded" && (i/4)%5 == 0 // one success in five
		wg.Go(func() {
			if status, err := loadkit.Post(client, follower.url, ev); err != nil || status != http.StatusAccepted || !sample {
				return
			}
			acked := time.Now()
			hash := fe.Metadata["revision"][strings.LastIndexByte(fe.Metadata["revision"], ':')+1:]
			layer := fe.InvolvedObject.Namespace + "/" + fe.InvolvedObject.Name
			for time.Since(acked) < 10*time.Second {
				if loadkit.LayerApplied(client, base, hash, layer) {
					mu.Lock()
					delays = append(delays, time.Since(acked))
					mu.Unlock()
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
			mu.Lock()
			missing++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(delays) == 0 {
		return errors.New("visibility: no sample")
	}
	slices.Sort(delays)
	pct := func(p float64) time.Duration { return delays[min(int(p*float64(len(delays))), len(delays)-1)] }
	fmt.Fprintf(out, "replicas: an event acknowledged by a follower at %d events/s shows in its /verdict after p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d samples, %d not within 10 s)\n",
		c.rate, ms(pct(0.5)), ms(pct(0.99)), ms(delays[len(delays)-1]), len(delays), missing)
	return nil
}
