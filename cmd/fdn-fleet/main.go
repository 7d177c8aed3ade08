// Command fdn-fleet runs the service binary against a whole fleet's worth of
// Flux events, one simulated day at a time, and prints what an operator
// sizing it needs per day: memory (RSS and Go heap), data dir size, ingest
// rate and ack latency, /verdict and /rollouts latency over the whole
// history (with /healthz's from the same moments and the CPU share the
// hypervisor stole meanwhile, to tell the machine's stalls from the
// service's work), and at the end the time to ready after
// a restart. Every verdict is checked: each commit rolls across all layers
// of its source, so each must read applied.
//
// Flux timestamps are spread over the last days (day d of D is D-d days
// ago), so that the history is as old as it would be; the service runs with
// a deadline and retention longer than the run, so nothing turns stuck or is
// collected because the days went by in minutes.
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
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/procstat"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

func main() { loadkit.Main("fdn-fleet", run) }

type config struct {
	binary      string
	sources     int
	layers      int
	commits     int // per source and day
	releases    int // HelmReleases per application layer (one no layer depends on)
	days        int
	concurrency int
	samples     int // /verdict requests per day
	dir         string
	memLimit    string // the service's GOMEMLIMIT
	gogc        string // the service's GOGC, "" for Go's default
	cgroup      int64  // when > 0, the service runs in a memory cgroup with this limit
	github      string // when set, the service shows its verdicts as deployments there (-github)
	postgres    string // when set, the service keeps its state in this database (-postgres)
	chats       string // when set, the service shows its verdicts in the channels of chatsIn there (-chats)
	chatsIn     map[string]bool
}

func run(args []string, out io.Writer) (err error) {
	fs := flag.NewFlagSet("fdn-fleet", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.binary, "binary", "bin/flux-deploy-notifier", "the service binary to run")
	fs.IntVar(&c.sources, "sources", 100, "GitRepositories")
	fs.IntVar(&c.layers, "layers", 85, "Kustomizations per source")
	fs.IntVar(&c.commits, "commits", 10, "commits a day per source")
	fs.IntVar(&c.releases, "releases", 3, "HelmReleases in each application layer (one no other layer depends on), each changed and released by every commit")
	fs.IntVar(&c.days, "days", 30, "simulated days")
	fs.IntVar(&c.concurrency, "concurrency", 32, "connections posting events")
	fs.IntVar(&c.samples, "samples", 1000, "/verdict requests a day, for random revisions of the whole history")
	fs.StringVar(&c.dir, "dir", "", "work directory (default: a new temporary one, removed at the end)")
	limit := fs.String("memory-limit", "", "run the service in a memory cgroup (v1, as root) with this limit in MiB, as a pod's limit, and report OOM kills")
	fs.StringVar(&c.memLimit, "gomemlimit", "192MiB", "GOMEMLIMIT of the service, as manifests/deployment.yaml sets it (\"\" for none)")
	fs.StringVar(&c.gogc, "gogc", "", "GOGC of the service alone (\"\": Go's default, 100), to weigh collections against heap and latency")
	withPostgres := fs.Bool("postgres", false, "keep the state in PostgreSQL (a server of Debian's postgresql package, started for the run, outside the service's cgroup): data is the database's size")
	withChats := fs.String("chats", "", "show the verdicts in these of slack,teams,webhook (stand-ins for them), and check that every commit reached each")
	withGitHub := fs.Bool("github", false, "show the verdicts as GitHub deployments in a stand-in for its API, and check that every one got there")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *limit != "" {
		mib, err := strconv.ParseInt(strings.TrimSuffix(*limit, "Mi"), 10, 64)
		if err != nil || mib <= 0 {
			return fmt.Errorf("-memory-limit %q: want MiB, such as 256", *limit)
		}
		c.cgroup = mib << 20
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "fdn-fleet-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		c.dir = d
	}
	token := []byte("fleet-token")
	if err := os.WriteFile(filepath.Join(c.dir, "token"), token, 0o600); err != nil {
		return err
	}
	if *withPostgres {
		pg, err := pgtest.Launch()
		if err != nil {
			return err
		}
		defer pg.Close()
		if c.postgres, err = pg.CreateDatabase(); err != nil {
			return err
		}
	}
	var gh *github
	if *withGitHub {
		if gh, err = startGitHub(); err != nil {
			return err
		}
		defer gh.srv.Close()
		c.github = gh.URL
		if err := os.WriteFile(filepath.Join(c.dir, "github-token"), []byte("ghs_fleet"), 0o600); err != nil {
			return err
		}
	}
	var ch *chats
	if *withChats != "" {
		c.chatsIn = map[string]bool{}
		for _, name := range strings.Split(*withChats, ",") {
			if name != "slack" && name != "teams" && name != "webhook" {
				return fmt.Errorf("-chats: %q is not slack, teams or webhook", name)
			}
			c.chatsIn[name] = true
		}
		if ch, err = startChats(); err != nil {
			return err
		}
		defer ch.srv.Close()
		c.chats = ch.URL
		for name, secret := range map[string]string{"slack-token": "xoxb-fleet", "teams-urls": ch.URL + "/teams", "hook-key": "fleet-key"} {
			if err := os.WriteFile(filepath.Join(c.dir, name), []byte(secret), 0o600); err != nil {
				return err
			}
		}
	}
	var cg *memcg
	if c.cgroup > 0 {
		var err error
		if cg, err = newMemcg(filepath.Base(c.dir), c.cgroup); err != nil {
			return err
		}
		defer cg.remove()
	}
	// An interrupted run stops its service, so that its requests fail and
	// run returns through the defers that remove the cgroup and the work
	// directory, instead of leaving them behind; the error is then the
	// interruption, not the failed request it caused.
	var current atomic.Pointer[service]
	var interrupted atomic.Bool
	defer func() {
		if err != nil && interrupted.Load() {
			err = errInterrupted
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer func() {
		// No signal is sent on sigs after Stop: closing it ends the
		// goroutine below.
		signal.Stop(sigs)
		close(sigs)
	}()
	go func() {
		if _, ok := <-sigs; ok {
			interrupted.Store(true)
			if s := current.Load(); s != nil {
				s.stop()
			}
		}
	}()
	start := func() (*service, error) {
		s, err := startService(c, cg)
		if err != nil {
			return nil, err
		}
		current.Store(s)
		if interrupted.Load() {
			s.stop()
			return nil, errInterrupted
		}
		return s, nil
	}
	svc, err := start()
	if err != nil {
		return err
	}
	defer func() { svc.stop() }()

	fleet := &fleet{c: c, token: token, now: time.Now().UTC().Truncate(time.Second)}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.concurrency}, Timeout: 30 * time.Second}
	fmt.Fprintf(out, "fleet: %d sources x %d layers (%d HelmReleases in each of the %d application layers), %d commits a day per source, %d days, %d connections, service GOMEMLIMIT %q GOGC %q\n",
		c.sources, c.layers, c.releases, apps(c.layers), c.commits, c.days, c.concurrency, c.memLimit, c.gogc)
	fmt.Fprintf(out, "%4s %8s %8s %8s %8s %9s %8s %8s %8s %8s %8s %7s %8s\n",
		"day", "RSS MiB", "peak", "anon", "heap", "data MiB", "ev/s", "ack p99", "vrd p50", "vrd p99", "hlz p99", "stolen", "lst p99")
	var refused atomic.Int64
	// hp99 and stolen are /healthz's p99 and the CPU stolen on the day of
	// the worst /verdict p99.
	worst := struct{ rss, anon, heap, data, vp99, hp99, stolen float64 }{}
	for day := range c.days {
		rate, ackP99, err := ingest(client, svc.url, fleet.day(day), c.concurrency, &refused)
		if err != nil {
			return fmt.Errorf("day %d: %w", day+1, err)
		}
		// The day's events, no longer used, are most of this program's
		// heap: collected now, its own collection does not land among the
		// samples below and add the load generator's pauses to the
		// service's latency.
		runtime.GC()
		if c.postgres != "" {
			// Acknowledged is in the inbox: what is sampled is what the
			// leader has taken.
			if err := drained(client, svc.url); err != nil {
				return fmt.Errorf("day %d: %w", day+1, err)
			}
		}
		v, err := fleet.verdicts(client, svc.url, c.samples)
		if err != nil {
			return fmt.Errorf("day %d: %w", day+1, err)
		}
		lp99, err := latency(client, svc.url+"/rollouts?limit=50", 200)
		if err != nil {
			return fmt.Errorf("day %d: %w", day+1, err)
		}
		rss, peak, anon := procstat.Memory(svc.pid)
		heap, err := metric(client, svc.url, "go_memstats_heap_inuse_bytes")
		if err != nil {
			return err
		}
		heap /= 1 << 20
		var data float64
		if c.postgres != "" {
			// The database's size, as the service reports it.
			data, err = metric(client, svc.url, "fdn_store_bytes")
			data /= 1 << 20
		} else {
			data, err = dirSize(svc.dataDir)
		}
		if err != nil {
			return err
		}
		worst.rss, worst.anon, worst.heap = max(worst.rss, peak), max(worst.anon, anon), max(worst.heap, heap)
		worst.data = max(worst.data, data)
		if ms(v.p99) > worst.vp99 {
			worst.vp99, worst.hp99, worst.stolen = ms(v.p99), ms(v.healthP99), 100*v.stolen
		}
		fmt.Fprintf(out, "%4d %8.0f %8.0f %8.0f %8.0f %9.0f %8.0f %8.2f %8.2f %8.2f %8.2f %6.0f%% %8.2f\n",
			day+1, rss, peak, anon, heap, data, rate, ms(ackP99), ms(v.p50), ms(v.p99), ms(v.healthP99), 100*v.stolen, ms(lp99))
		if c.postgres != "" {
			if rel, err := relationSizes(c.postgres); err == nil {
				fmt.Fprintf(out, "     database: %s\n", rel)
			}
		}
	}

	// Every revision of the history, once more: all applied, none lost.
	wrong, err := fleet.checkAll(client, svc.url)
	if err != nil {
		return err
	}
	if gh != nil {
		ok, deps, statuses, waited := gh.await(len(fleet.revs), 5*time.Minute)
		fmt.Fprintf(out, "github: %d of %d commits shown applied (%d deployments, %d statuses), the last %.1f s after the last check\n",
			ok, len(fleet.revs), deps, statuses, waited.Seconds())
		if ok < len(fleet.revs) {
			wrong += len(fleet.revs) - ok
		}
	}
	if ch != nil {
		applied, waited := ch.await(c.chatsIn, len(fleet.revs), 5*time.Minute)
		fmt.Fprintf(out, "chats: %d of %d commits shown applied in each channel (%s), the last %.1f s after the last check\n",
			applied, len(fleet.revs), ch.counts(), waited.Seconds())
		if applied < len(fleet.revs) {
			wrong += len(fleet.revs) - applied
		}
	}
	t0 := time.Now()
	svc.stop()
	stopped := time.Since(t0)
	t0 = time.Now()
	// svc stays the stopped one if the start fails: the deferred stop is
	// then a no-op instead of a nil dereference.
	next, err := start()
	if err != nil {
		return err
	}
	svc = next
	if err := loadkit.AwaitReady(client, svc.url, 2*time.Minute); err != nil {
		return err
	}
	ready := time.Since(t0)
	wrongAfter, err := fleet.checkAll(client, svc.url)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "restart: stopped in %.2f s, ready in %.2f s (%d revisions checked after it, %d not applied)\n",
		stopped.Seconds(), ready.Seconds(), len(fleet.revs), wrongAfter)
	if cg != nil {
		fmt.Fprintln(out, cg.report())
	}
	fmt.Fprintf(out, "summary: peak RSS %.0f MiB (anonymous at most %.0f), max heap %.0f MiB, max data %.0f MiB, max /verdict p99 %.2f ms (that day /healthz p99 %.2f ms, CPU stolen %.0f%%), %d events refused, %d of %d verdicts not applied\n",
		worst.rss, worst.anon, worst.heap, worst.data, worst.vp99, worst.hp99, worst.stolen, refused.Load(), wrong, len(fleet.revs))
	if refused.Load() > 0 || wrong > 0 || wrongAfter > 0 {
		return errors.New("events were refused or verdicts were wrong")
	}
	return nil
}

var errInterrupted = errors.New("interrupted")

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// service is the binary under test, in its own process.
type service struct {
	url     string
	pid     int
	dataDir string
	stop    func()
}

func startService(c config, cg *memcg) (*service, error) {
	data := filepath.Join(c.dir, "data")
	horizon := (time.Duration(c.days) + 2) * 24 * time.Hour
	state := []string{"--data-dir", data}
	if c.postgres != "" {
		state = []string{"--postgres", c.postgres}
	}
	cmd := exec.Command(c.binary, append(append([]string{"serve", "--listen", "127.0.0.1:0"}, state...),
		"--hmac-token-file", filepath.Join(c.dir, "token"), "--cluster=off", "--log-level", "warn",
		"--stuck-after", horizon.String(), "--retention", horizon.String(),
		"--mail-to", "fleet@localhost", "--mail-dir", filepath.Join(c.dir, "mail"))...)
	if c.github != "" {
		cmd.Args = append(cmd.Args, "--github-api-url", c.github, "--github-token-file", filepath.Join(c.dir, "github-token"),
			"--github-repo", "acme/fleet")
	}
	if c.chatsIn["slack"] {
		cmd.Args = append(cmd.Args, "--slack-api-url", c.chats+"/api/", "--slack-token-file", filepath.Join(c.dir, "slack-token"), "--slack-channel", "#fleet")
	}
	if c.chatsIn["teams"] {
		cmd.Args = append(cmd.Args, "--teams-webhook-file", filepath.Join(c.dir, "teams-urls"))
	}
	if c.chatsIn["webhook"] {
		cmd.Args = append(cmd.Args, "--webhook-url", c.chats+"/hook", "--webhook-secret-file", filepath.Join(c.dir, "hook-key"))
	}
	cmd.Stderr = os.Stderr
	cmd.Env = os.Environ()
	if c.memLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+c.memLimit)
	}
	if c.gogc != "" {
		cmd.Env = append(cmd.Env, "GOGC="+c.gogc)
	}
	var join func(pid int) error
	if cg != nil {
		join = cg.add
	}
	url, stop, err := loadkit.Start(cmd, 30*time.Second, join)
	if err != nil {
		return nil, err
	}
	return &service{url: url, pid: cmd.Process.Pid, dataDir: data, stop: stop}, nil
}

// metric is the value of the gauge name (without labels) on the
// service's /metrics.
func metric(client *http.Client, url, name string) (float64, error) {
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /metrics", name)
}

// drained waits until the leader has taken every acknowledged event from
// the inbox (fdn_inbox_depth 0).
func drained(client *http.Client, url string) error {
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		depth, err := metric(client, url, "fdn_inbox_depth")
		if err != nil {
			return err
		}
		if depth == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the inbox was not drained within 10 minutes")
		}
	}
}

// relationSizes names the database's largest tables with their size
// (TOAST and indexes included) and dead rows: where the size goes.
func relationSizes(conn string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, `SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup
		FROM pg_stat_user_tables ORDER BY 2 DESC LIMIT 4`)
	if err != nil {
		return "", err
	}
	var parts []string
	for rows.Next() {
		var (
			name       string
			size       int64
			live, dead int64
		)
		if err := rows.Scan(&name, &size, &live, &dead); err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s %.0f MiB (%d rows, %d dead)", name, float64(size)/(1<<20), live, dead))
	}
	return strings.Join(parts, ", "), rows.Err()
}

// dirSize is the apparent size of every file under dir, in MiB: what a
// volume must hold.
func dirSize(dir string) (float64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return float64(n) / (1 << 20), err
}

// fleet generates the events and remembers every revision it rolled out.
type fleet struct {
	c     config
	token []byte
	now   time.Time
	revs  []string // hashes
}

type event = loadkit.Event

// apps is how many of n layers no other layer depends on (layer i depends
// on layer (i-1)/4): the application layers, which hold HelmReleases.
func apps(n int) int {
	k := 0
	for l := range n {
		if 4*l+1 >= n {
			k++
		}
	}
	return k
}

// day builds one simulated day: each source gets c.commits commits spread
// over the day, each rolling across all its layers in dependsOn order
// (layer i depends on layer (i-1)/4): the source's NewArtifact, then per
// layer DependencyNotReady for dependents, Progressing and
// ReconciliationSucceeded. In an application layer the Progressing event
// names the HelmReleases the apply configured, and each reports its
// upgrade after the layer's success: a layer has applied the commit only
// then. The first release's chart is built from the commit (its version
// names it: the model's attribution by commit), the others' names none.
// Commits are interleaved across sources as they would be over a day.
//
// The day is posted in phases: each round of commits (one a source), then
// its releases' events. Posted with the layers' from 32 connections, a
// release's event could overtake the layer's report that its apply changed
// the release, and be one that no apply explains (README, "Limits known
// today"); posted after the whole day's, after its source's next commit,
// whose layers supersede it before its releases report.
func (f *fleet) day(d int) [][]event {
	c := f.c
	base := f.now.Add(-time.Duration(c.days-d) * 24 * time.Hour)
	gap := 24 * time.Hour / time.Duration(c.commits)
	var phases [][]event
	for k := range c.commits {
		var out, pending []event
		for s := range c.sources {
			sum := sha1.Sum(fmt.Appendf(nil, "fleet-%d-%d-%d", s, d, k))
			hash := hex.EncodeToString(sum[:])
			f.revs = append(f.revs, hash)
			rev := "main@sha1:" + hash
			t := base.Add(time.Duration(k)*gap + time.Duration(s)*7*time.Second)
			src := fmt.Sprintf("src-%03d", s)
			out = append(out, f.event("GitRepository", src, "source-controller", t, "NewArtifact",
				fmt.Sprintf("stored artifact for commit 'Change %d of day %d'", k, d+1), rev))
			for l := range c.layers {
				name := fmt.Sprintf("%s-l%02d", src, l)
				depth := 0
				for p := l; p > 0; p = (p - 1) / 4 {
					depth++
				}
				at := t.Add(time.Duration(1+depth*30) * time.Second)
				if l > 0 {
					out = append(out, f.event("Kustomization", name, "kustomize-controller", t.Add(time.Second),
						"DependencyNotReady", "Dependencies do not meet ready condition, retrying in 30s", rev))
				}
				changed := fmt.Sprintf("Deployment/%s/web configured\nConfigMap/%s/settings-%d created", name, name, k)
				releases := 0
				if 4*l+1 >= c.layers {
					releases = c.releases
				}
				for i := range releases {
					changed += fmt.Sprintf("\nHelmRelease/%s/release-%d configured", name, i)
				}
				out = append(out,
					f.event("Kustomization", name, "kustomize-controller", at, "Progressing", changed, rev),
					f.event("Kustomization", name, "kustomize-controller", at.Add(2*time.Second), "ReconciliationSucceeded",
						"Reconciliation finished in 2.31s, next run in 10m0s", rev))
				for i := range releases {
					version := "1.0.0"
					if i == 0 {
						version += "+" + hash[:12]
					}
					pending = append(pending, f.eventIn("HelmRelease", name, fmt.Sprintf("release-%d", i), "helm-controller", at.Add(3*time.Second),
						"UpgradeSucceeded", fmt.Sprintf("Helm upgrade succeeded for release %s/release-%d.v%d with chart web@%s", name, i, d*c.commits+k+2, version), version))
				}
			}
		}
		phases = append(phases, out)
		if len(pending) > 0 {
			phases = append(phases, pending)
		}
	}
	return phases
}

func (f *fleet) event(kind, name, controller string, at time.Time, reason, msg, rev string) event {
	return f.eventIn(kind, "flux-system", name, controller, at, reason, msg, rev)
}

func (f *fleet) eventIn(kind, namespace, name, controller string, at time.Time, reason, msg, rev string) event {
	apiVersion := "kustomize.toolkit.fluxcd.io/v1"
	switch kind {
	case "GitRepository":
		apiVersion = "source.toolkit.fluxcd.io/v1"
	case "HelmRelease":
		apiVersion = "helm.toolkit.fluxcd.io/v2"
	}
	return loadkit.Signed(f.token, flux.Event{
		InvolvedObject: flux.ObjectRef{Kind: kind, Namespace: namespace, Name: name,
			UID: "7d0cdc51-ddcf-4743-b223-83ca5c699632", APIVersion: apiVersion, ResourceVersion: "1"},
		Severity: "info", Timestamp: at.Format(time.RFC3339), Message: msg, Reason: reason,
		Metadata:            map[string]string{"revision": rev},
		ReportingController: controller,
	})
}

// ingest posts each phase's events from n connections, a phase once the
// one before is acknowledged, and returns the rate acknowledged and the
// p99 time to acknowledgement.
func ingest(client *http.Client, url string, phases [][]event, n int, refused *atomic.Int64) (float64, time.Duration, error) {
	var (
		lat     []time.Duration
		elapsed time.Duration
		total   int
	)
	for _, evs := range phases {
		l, el, err := post1(client, url, evs, n, refused)
		if err != nil {
			return 0, 0, err
		}
		lat, elapsed, total = append(lat, l...), elapsed+el, total+len(evs)
	}
	return float64(total) / elapsed.Seconds(), percentile(lat, 99), nil
}

// post1 posts evs from n connections and returns the time each took to be
// acknowledged and the time they all took.
func post1(client *http.Client, url string, evs []event, n int, refused *atomic.Int64) ([]time.Duration, time.Duration, error) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, len(evs))
		errs = make(chan error, n)
	)
	start := time.Now()
	for range n {
		wg.Go(func() {
			mine := make([]time.Duration, 0, len(evs)/n+1)
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(evs)) {
					return
				}
				t := time.Now()
				status, err := loadkit.Post(client, url+"/webhook", evs[i])
				if err != nil {
					errs <- err
					return
				}
				if status != http.StatusAccepted {
					refused.Add(1)
				}
				mine = append(mine, time.Since(t))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return lat, el, nil
}

// sampled is a day's /verdict latency and, from the same moments, the
// service's cheapest answer's: /healthz after each /verdict, on the same
// connection. A stall of the machine or of the process delays both; what
// /verdict takes beyond /healthz is its own. stolen is the share of the
// machine's CPU time the hypervisor took meanwhile.
type sampled struct {
	p50, p99, healthP99 time.Duration
	stolen              float64
}

// verdicts asks for n random revisions of the whole history, checks each is
// applied, and returns the latency: from the request to the last byte of
// the answer, as the service gives it. Decoding it is the client's work,
// and is done after the clock stops.
func (f *fleet) verdicts(client *http.Client, url string, n int) (sampled, error) {
	lat := make([]time.Duration, 0, n)
	health := make([]time.Duration, 0, n)
	var body bytes.Buffer
	ticks := procstat.Read()
	for range n {
		hash := f.revs[rand.IntN(len(f.revs))]
		v, took, err := verdictOf(client, url, hash, &body)
		if err != nil {
			return sampled{}, err
		}
		lat = append(lat, took)
		if v != "applied" {
			return sampled{}, fmt.Errorf("revision %s is %s, want applied", hash, v)
		}
		took, err = timedGet(client, url+"/healthz")
		if err != nil {
			return sampled{}, err
		}
		health = append(health, took)
	}
	return sampled{percentile(lat, 50), percentile(lat, 99), percentile(health, 99), procstat.Read().Since(ticks).Stolen()}, nil
}

// checkAll counts the revisions of the history whose verdict is not applied.
func (f *fleet) checkAll(client *http.Client, url string) (int, error) {
	wrong := 0
	var body bytes.Buffer
	for _, h := range f.revs {
		v, _, err := verdictOf(client, url, h, &body)
		if err != nil {
			return 0, err
		}
		if v != "applied" {
			wrong++
		}
	}
	return wrong, nil
}

// verdictOf asks the service for a revision's verdict, reading the answer
// into body; took is the request's time, without decoding the answer. A
// status other than 200 or 404 is an error.
func verdictOf(client *http.Client, url, hash string, body *bytes.Buffer) (verdict string, took time.Duration, err error) {
	t := time.Now()
	resp, err := client.Get(url + "/verdict?rev=" + hash)
	if err != nil {
		return "", 0, err
	}
	body.Reset()
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	took = time.Since(t)
	if err != nil {
		return "", 0, err
	}
	// 404 is a revision the service does not know, an answer like 200's;
	// anything else is the request's fault or the service's, not a verdict.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return "", 0, fmt.Errorf("verdict %s: %s: %s", hash, resp.Status, bytes.TrimSpace(body.Bytes()))
	}
	var v struct {
		Verdict string `json:"verdict"`
	}
	if err := json.Unmarshal(body.Bytes(), &v); err != nil {
		return "", 0, fmt.Errorf("verdict %s: %w", hash, err)
	}
	return v.Verdict, took, nil
}

func latency(client *http.Client, url string, n int) (time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		took, err := timedGet(client, url)
		if err != nil {
			return 0, err
		}
		lat = append(lat, took)
	}
	return percentile(lat, 99), nil
}

// percentile sorts lat and returns its pct-th percentile.
func percentile(lat []time.Duration, pct int) time.Duration {
	slices.Sort(lat)
	return lat[len(lat)*pct/100]
}

// timedGet is a GET's time to the last byte of a 200 answer.
func timedGet(client *http.Client, url string) (time.Duration, error) {
	t := time.Now()
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return time.Since(t), nil
}

// memcg is a cgroup v1 memory controller group the service runs in, with a
// hard limit as a pod's: the kernel reclaims page cache (bbolt's mapped
// file) within it and kills the process only if its own memory does not fit.
type memcg struct{ dir string }

func newMemcg(name string, limit int64) (*memcg, error) {
	dir := filepath.Join("/sys/fs/cgroup/memory", "fdn-fleet-"+name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup (needs root and cgroup v1's memory controller): %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("memory cgroup limit: %w", err)
	}
	return &memcg{dir: dir}, nil
}

func (m *memcg) add(pid int) error {
	return os.WriteFile(filepath.Join(m.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

func (m *memcg) value(file string) string {
	b, _ := os.ReadFile(filepath.Join(m.dir, file))
	return strings.TrimSpace(string(b))
}

func (m *memcg) report() string {
	peak, _ := strconv.ParseFloat(m.value("memory.max_usage_in_bytes"), 64)
	limit, _ := strconv.ParseFloat(m.value("memory.limit_in_bytes"), 64)
	oom := "0"
	for _, l := range strings.Split(m.value("memory.oom_control"), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			oom = v
		}
	}
	return fmt.Sprintf("memory cgroup: limit %.0f MiB, peak charged %.0f MiB (page cache included), limit reached %s times, OOM kills %s",
		limit/(1<<20), peak/(1<<20), m.value("memory.failcnt"), oom)
}

func (m *memcg) remove() { _ = os.Remove(m.dir) }
