package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent/cloudeventtest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/forgetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/slack/slacktest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail/smtptest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// Several real replicas on one real PostgreSQL, one of them killed or
// paused: every event acknowledged by any replica survives, every replica
// shows the same verdicts, each mail goes out once (at most one duplicate
// per crash, with the same Message-ID), and a successor takes over in
// time.

type replicas struct {
	t      *testing.T
	bin    string
	pg     *pgtest.Server
	conn   string
	token  []byte
	args   []string
	smtp   *smtptest.Server
	all    []*child
	mu     sync.Mutex
	killed map[*child]bool // or stopped: out of the round robin
}

func startReplicas(t *testing.T, n int, extra ...string) *replicas {
	t.Helper()
	if testing.Short() {
		t.Skip("runs several real binaries on a real PostgreSQL")
	}
	r := &replicas{t: t, bin: buildBinary(t, true), pg: pgtest.Start(t), token: []byte("replica-token"),
		smtp: smtptest.Start(t, smtptest.Options{}), killed: map[*child]bool{}}
	r.conn = r.pg.NewDatabase(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, r.token, 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing settles during a test: the events' times are days old, and a
	// settled rollout ignores what arrives about it later, by design.
	r.args = append([]string{"--postgres", r.conn, "--hmac-token-file", tokenFile, "--stuck-after", "8760h", "--retention", "87600h", "--settle-after", "8760h",
		"--smtp-addr", r.smtp.Addr, "--smtp-tls", "none", "--mail-to", "dev@example.com", "--data-dir", t.TempDir()}, extra...)
	for range n {
		r.start()
	}
	return r
}

func (r *replicas) start() *child { return r.startBin(r.bin) }

// startBin starts a replica of the binary bin (an earlier release's).
func (r *replicas) startBin(bin string) *child {
	c := startChild(r.t, bin, r.args...)
	r.mu.Lock()
	r.all = append(r.all, c)
	r.mu.Unlock()
	return c
}

// every is each replica started, live or not.
func (r *replicas) every() []*child {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*child(nil), r.all...)
}

// out takes c out of the round robin (killed or stopped), or back in.
func (r *replicas) out(c *child, gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gone {
		r.killed[c] = true
	} else {
		delete(r.killed, c)
	}
}

func (r *replicas) alive() []*child {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*child
	for _, c := range r.all {
		if !r.killed[c] {
			out = append(out, c)
		}
	}
	return out
}

// role is what a replica's /readyz says it is ("" when it does not answer).
func role(url string) string {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var body struct {
		Role  string `json:"role"`
		Ready bool   `json:"ready"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil || !body.Ready {
		return ""
	}
	return body.Role
}

// ready waits until c is ready, as a leader or a follower.
func (r *replicas) ready(c *child) {
	r.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); role(c.url) == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("the new replica is not ready:\n%s", tail(c.logs.String(), 20))
		}
	}
}

// leader waits for exactly one live replica to lead, and returns it.
func (r *replicas) leader(within time.Duration) *child {
	r.t.Helper()
	c, err := r.awaitLeader(within)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// awaitLeader is leader for a goroutine other than the test's.
func (r *replicas) awaitLeader(within time.Duration) (*child, error) {
	deadline := time.Now().Add(within)
	for {
		var leaders []*child
		for _, c := range r.alive() {
			if role(c.url) == "leader" {
				leaders = append(leaders, c)
			}
		}
		if len(leaders) == 1 {
			return leaders[0], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d leaders after %s", len(leaders), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// postAll posts events through a round-robin client over the live
// replicas with notification-controller's retries (up to 5 attempts, 2 s
// backoff doubling, within 15 s; connection errors and 5xx retried, on the
// next replica as a Service would pick), and reports which were
// acknowledged. during is called with the count acknowledged so far after
// each acknowledgement.
func (r *replicas) postAll(events []crashEvent, during func(acked int64)) []bool {
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	acked := make([]bool, len(events))
	var n, next atomic.Int64
	work := make(chan int)
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for i := range work {
				start := time.Now()
				for attempt, backoff := 0, 2*time.Second; attempt < 5 && time.Since(start) < 15*time.Second; attempt, backoff = attempt+1, backoff*2 {
					live := r.alive()
					c := live[int(next.Add(1))%len(live)]
					status := post(client, c.url, r.token, events[i])
					if status == http.StatusAccepted {
						acked[i] = true
						if during != nil {
							during(n.Add(1))
						}
						break
					}
					if status != 0 && status < 500 {
						break // not retried
					}
					time.Sleep(min(backoff, 30*time.Second))
				}
			}
		})
	}
	for i := range events {
		work <- i
	}
	close(work)
	wg.Wait()
	return acked
}

// converged waits until every live replica shows every acknowledged event
// and the same verdict for each rollout.
func (r *replicas) converged(events []crashEvent, acked []bool) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := 0
		for _, c := range r.alive() {
			missing += len(verifyReflected(r.t, c.url, events, func(i int) bool { return acked[i] }))
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, c := range r.alive() {
				for _, i := range verifyReflected(r.t, c.url, events, func(i int) bool { return acked[i] }) {
					r.t.Logf("%s misses %s on %s: %s", c.url, events[i].hash, events[i].layer, verdictOf(r.t, c.url, events[i].hash))
				}
			}
			if db, co, err := store.OpenPostgres(context.Background(), r.conn, store.PostgresOptions{}); err == nil {
				p, err := co.Tail(context.Background(), store.Position{}, 100)
				r.t.Logf("inbox: %d entries, more held %v (%v)", len(p.Entries), p.Held, err)
				db.Close()
			}
			r.t.Fatalf("%d acknowledged events not shown after 30 s", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	hashes := map[string]bool{}
	for _, e := range events {
		hashes[e.hash] = true
	}
	for h := range hashes {
		var first string
		for i, c := range r.alive() {
			v := verdictOf(r.t, c.url, h)
			if i == 0 {
				first = v
			} else if v != first {
				r.t.Fatalf("replicas disagree on %s: %s against %s", h, v, first)
			}
		}
	}
}

// verdictOf is a rollout's verdict and its layers' states as a replica
// answers them.
func verdictOf(t *testing.T, url, hash string) string {
	t.Helper()
	resp, err := http.Get(url + "/verdict?rev=" + hash)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Verdict string                         `json:"verdict"`
		Layers  []struct{ Name, State string } `json:"layers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(resp.StatusCode, v)
}

// mailsOnce waits until the outbox is empty, then checks that every mail
// logged as sent reached the SMTP server, none more than twice, and at
// most dups of them twice.
func (r *replicas) mailsOnce(events []crashEvent, dups int) {
	r.t.Helper()
	db, _, err := store.OpenPostgres(context.Background(), r.conn, store.PostgresOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	defer db.Close()
	mailsDrained(r.t, db)
	logged := 0
	seen := map[string]bool{}
	for _, e := range events {
		if seen[e.hash] {
			continue
		}
		seen[e.hash] = true
		log, err := db.MailLog(rollout.Key{Cluster: "default", Hash: e.hash})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, m := range log {
			if m.State != "sent" {
				r.t.Fatalf("a mail of %s is %s", e.hash, m.State)
			}
		}
		logged += len(log)
	}
	ids := map[string]int{}
	for _, m := range r.smtp.Messages() {
		ids[m.Header.Get("Message-Id")]++
	}
	twice := 0
	for id, n := range ids {
		switch {
		case n > 2:
			r.t.Fatalf("%s sent %d times", id, n)
		case n == 2:
			twice++
		}
	}
	if len(ids) != logged || twice > dups {
		r.t.Fatalf("%d distinct mails reached the server (%d twice), %d logged sent; want them equal, at most %d twice", len(ids), twice, logged, dups)
	}
	r.t.Logf("%d mails, %d of them twice", logged, twice)
}

// TestReplicasSurviveLeaderKill: three replicas with the default lease;
// events posted to all of them; the leader SIGKILLed mid-stream.
func TestReplicasSurviveLeaderKill(t *testing.T) {
	r := startReplicas(t, 3)
	old := r.leader(20 * time.Second)
	events := crashEvents(1500, 10)
	var once sync.Once
	took := make(chan time.Duration, 1)
	var awaitErr error
	acked := r.postAll(events, func(n int64) {
		if n == int64(len(events)/3) {
			once.Do(func() {
				_ = old.cmd.Process.Kill() // the PID this test started
				r.out(old, true)
				go func(killed time.Time) {
					_, awaitErr = r.awaitLeader(30 * time.Second)
					took <- time.Since(killed)
				}(time.Now())
			})
		}
	})
	_ = old.cmd.Wait()
	takeover := <-took
	if awaitErr != nil {
		t.Fatal(awaitErr)
	}
	successor := r.leader(time.Second)
	n := 0
	for _, a := range acked {
		if a {
			n++
		}
	}
	t.Logf("%d of %d events acknowledged; %s leads %s after the kill (at most)", n, len(events), successor.url, takeover.Round(time.Millisecond))
	if takeover > 15*time.Second {
		t.Fatalf("the successor took %s to lead, want within 15 s", takeover)
	}
	// Serving as leader (its engine loaded, the views shown) within 5 s of
	// taking the lease.
	servingRE := regexp.MustCompile(`msg="serving as leader" rollouts=\d+ took=(\S+)`)
	var serving [][]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if serving = servingRE.FindAllStringSubmatch(successor.logs.String(), -1); len(serving) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the successor never said it serves as leader:\n%s", tail(successor.logs.String(), 20))
		}
	}
	if d, err := time.ParseDuration(serving[len(serving)-1][1]); err != nil || d > 5*time.Second {
		t.Fatalf("the successor served as leader %s after taking the lease (%v), want within 5 s", serving[len(serving)-1][1], err)
	} else {
		t.Logf("serving as leader %s after taking the lease", d)
	}
	r.converged(events, acked)
	r.mailsOnce(events, 1)
}

// TestFollowerAnswersWhileNoneLeads: the leader SIGKILLed, a commit's
// events posted to the other replica before its lease runs out: that
// replica answers /verdict for the commit from its own engine while it
// still follows, nobody leading (before, a 404 on every replica until a
// successor led).
func TestFollowerAnswersWhileNoneLeads(t *testing.T) {
	r := startReplicas(t, 2, "--lease-duration", "30s", "--lease-renew", "2s")
	old := r.leader(40 * time.Second)
	_ = old.cmd.Process.Kill() // the PID this test started
	r.out(old, true)
	_ = old.cmd.Wait()
	follower := r.alive()[0]
	events := crashEvents(3, 3) // one commit over three layers
	acked := r.postAll(events, nil)
	posted := time.Now()
	for i, a := range acked {
		if !a {
			t.Fatalf("event %d not acknowledged", i)
		}
	}
	all := func(int) bool { return true }
	for deadline := time.Now().Add(20 * time.Second); len(verifyReflected(t, follower.url, events, all)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the follower does not show the commit it acknowledged: %s\n%s", verdictOf(t, follower.url, events[0].hash), tail(follower.logs.String(), 20))
		}
	}
	shown := time.Since(posted)
	if got := role(follower.url); got != "follower" {
		t.Fatalf("the replica is %q once it shows the commit: it must show it while nobody leads", got)
	}
	t.Logf("shown %s after the last acknowledgement, nobody leading", shown.Round(time.Millisecond))
}

// TestPausedLeaderSendsNothing: the leader is stopped (SIGSTOP) past its
// lease; another takes over and sends the mails of events posted
// meanwhile; the old one, continued, commits and sends nothing.
func TestPausedLeaderSendsNothing(t *testing.T) {
	r := startReplicas(t, 2, "--lease-duration", "2s", "--lease-renew", "500ms")
	old := r.leader(20 * time.Second)
	events := crashEvents(200, 10)
	acked := r.postAll(events[:100], nil)
	r.converged(events[:100], acked)
	r.mailsOnce(events[:100], 0)

	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r.out(old, true)
	successor := r.leader(20 * time.Second)
	acked2 := r.postAll(events[100:], nil)
	r.converged(events[100:], acked2)
	if err := old.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r.out(old, false)
	for deadline := time.Now().Add(20 * time.Second); role(old.url) != "follower"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the continued replica never follows: %q\n%s", role(old.url), tail(old.logs.String(), 3000))
		}
	}
	if r.leader(5*time.Second) != successor {
		t.Fatal("leadership moved back")
	}
	r.converged(events, append(acked, acked2...))
	r.mailsOnce(events, 0)
}

// TestPostgresDown: while PostgreSQL is down, events are answered 503 and
// /readyz is not ready, with one log line and a metric saying why; when it
// is back every replica goes on without a restart. Then a restart of
// PostgreSQL mid-stream, and the leader's connections terminated: no
// acknowledged event or mail is lost, none sent twice but one a fault.
func TestPostgresDown(t *testing.T) {
	r := startReplicas(t, 2, "--lease-duration", "2s", "--lease-renew", "500ms")
	r.leader(20 * time.Second)
	events := crashEvents(900, 10)
	acked := r.postAll(events[:300], nil)
	r.converged(events[:300], acked)
	// The mails of those sent and recorded first: no mail is under way
	// when PostgreSQL stops (a mail sent whose record then fails would be
	// sent again, a fault of its own), so each of the two faults below
	// may repeat one.
	db, _, err := store.OpenPostgres(context.Background(), r.conn, store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mailsDrained(t, db)
	db.Close()

	r.pg.Stop()
	client := &http.Client{Timeout: 15 * time.Second}
	for i, c := range r.every() {
		for j := range 3 {
			if status := post(client, c.url, r.token, events[300+i*3+j]); status != http.StatusServiceUnavailable {
				t.Fatalf("an event while PostgreSQL is down: %d, want 503", status)
			}
		}
		awaitReadyz(t, c.url, "not ready, saying why", func(status int, warnings []string) bool {
			return status == http.StatusServiceUnavailable && len(warnings) > 0 && strings.Contains(warnings[0], "PostgreSQL fails")
		})
		if v := metric(t, c.url, "fdn_store_commit_failures_total"); v != "3" {
			t.Fatalf("fdn_store_commit_failures_total %q, want 3", v)
		}
	}
	r.pg.Resume(t)
	for _, c := range r.every() {
		awaitReadyz(t, c.url, "ready again", func(status int, _ []string) bool { return status == http.StatusOK })
		if n := strings.Count(c.logs.String(), "storing events in PostgreSQL fails"); n != 1 {
			t.Fatalf("the failure logged %d times, want once:\n%s", n, tail(c.logs.String(), 3000))
		}
	}
	r.leader(20 * time.Second)
	// A restart mid-stream.
	var once sync.Once
	bounced := make(chan error, 1)
	acked2 := r.postAll(events[300:600], func(n int64) {
		if n == 100 {
			once.Do(func() { go func() { bounced <- r.pg.Bounce() }() })
		}
	})
	if err := <-bounced; err != nil {
		t.Fatal(err)
	}
	r.converged(events[300:600], acked2)
	for _, c := range r.every() {
		if !strings.Contains(c.logs.String(), "storing events in PostgreSQL succeeds again") {
			t.Fatalf("the recovery is not logged:\n%s", tail(c.logs.String(), 3000))
		}
	}
	// The leader's connections terminated mid-stream.
	var once2 sync.Once
	terminated := make(chan int, 1)
	acked3 := r.postAll(events[600:], func(n int64) {
		if n == 100 {
			once2.Do(func() { terminated <- r.terminateLeader() })
		}
	})
	if n := <-terminated; n == 0 {
		t.Fatal("no connection of the leader was terminated")
	}
	all := append(append(acked, acked2...), acked3...)
	r.leader(20 * time.Second)
	r.converged(events, all)
	r.mailsOnce(events, 2)
}

// mailsDrained waits until the mail outbox is empty: every mail due sent
// and recorded.
func mailsDrained(t *testing.T, db *store.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending, err := db.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d mails still pending after 30 s", len(pending))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// terminateLeader ends every connection of the leader to PostgreSQL
// (pg_terminate_backend), and returns how many it ended; 0 on failure.
func (r *replicas) terminateLeader() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, r.conn)
	if err != nil {
		return 0
	}
	defer c.Close(context.Background())
	var n int
	err = c.QueryRow(ctx, `SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a
		WHERE a.application_name = 'flux-deploy-notifier ' || (SELECT holder FROM fdn_leader) AND a.pid <> pg_backend_pid()`).Scan(&n)
	if err != nil {
		return 0
	}
	return n
}

// TestRollingReplacement: every replica is replaced, one at a time (a new
// one started and ready, then the old one out of the round robin and
// stopped with SIGTERM, as a RollingUpdate with maxUnavailable 0 does),
// while events are posted: every 202 survives, the replicas agree, and no
// mail goes twice (a leader stopping gives its lease up after its last
// send is recorded).
func TestRollingReplacement(t *testing.T) {
	r := startReplicas(t, 3)
	r.leader(20 * time.Second)
	events := crashEvents(3000, 10)
	started := make(chan struct{})
	var once sync.Once
	posted := make(chan []bool, 1)
	go func() {
		posted <- r.postAll(events, func(n int64) {
			if n == 100 {
				once.Do(func() { close(started) })
			}
		})
	}()
	<-started
	for _, old := range r.every() {
		r.ready(r.start())
		r.out(old, true)
		stop(t, old)
	}
	acked := <-posted
	r.leader(20 * time.Second)
	r.converged(events, acked)
	r.mailsOnce(events, 0)
}

// TestLoginAcrossReplicas: a session made by the login form of one replica
// is taken by the others, and the form's limit of wrong tokens a minute
// holds across replicas: guesses spread over them are counted together.
func TestLoginAcrossReplicas(t *testing.T) {
	verdictFile := filepath.Join(t.TempDir(), "verdict-token")
	if err := os.WriteFile(verdictFile, []byte("the-verdict-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startReplicas(t, 2, "--verdict-token-file", verdictFile)
	a, b := r.all[0], r.all[1]
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(c *child, token string) *http.Response {
		t.Helper()
		resp, err := noRedirect.PostForm(c.url+"/ui/login", url.Values{"token": {token}, "next": {"/ui/"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := login(a, "the-verdict-token")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Fatalf("login on a: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, b.url+"/ui/", nil)
	req.AddCookie(resp.Cookies()[0])
	page, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusOK {
		t.Fatalf("a's session on b: %d", page.StatusCode)
	}
	// Ten wrong tokens, five on each: the limit of the minute.
	for i := range 10 {
		if got := login([]*child{a, b}[i%2], "wrong").StatusCode; got != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, got)
		}
	}
	for _, c := range []*child{a, b} {
		if got := login(c, "the-verdict-token").StatusCode; got != http.StatusTooManyRequests {
			t.Fatalf("the right token after ten wrong ones on both replicas: %d, want 429", got)
		}
	}
}

// TestForgeAcrossTakeover: the leader is killed as soon as the forge made
// a rollout's deployment, before its status: the successor finds that
// deployment again (through its record and the forge's marker) and gives
// it its status; none is made twice.
func TestForgeAcrossTakeover(t *testing.T) {
	gh := forgetest.StartGitHub(t, "ghs_replicas", time.Now, "acme/fleet")
	ghToken := filepath.Join(t.TempDir(), "github-token")
	if err := os.WriteFile(ghToken, []byte("ghs_replicas\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startReplicas(t, 2, "--lease-duration", "2s", "--lease-renew", "500ms", "--external-url", "https://fdn.example.com",
		"--github-api-url", gh.URL, "--github-token-file", ghToken, "--github-repo", "acme/fleet")
	old := r.leader(20 * time.Second)
	killed := make(chan struct{})
	var once sync.Once
	gh.AfterCreate(func(forgetest.Deployment) {
		once.Do(func() {
			_ = old.cmd.Process.Kill() // the PID this test started
			r.out(old, true)
			close(killed)
		})
	})
	events := crashEvents(3, 3) // one rollout over three layers
	acked := r.postAll(events, nil)
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatalf("no deployment made:\n%s", tail(old.logs.String(), 20))
	}
	_ = old.cmd.Wait()
	r.leader(20 * time.Second)
	r.converged(events, acked)
	var deps []forgetest.Deployment
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		deps = gh.Deployments("acme/fleet")
		if len(deps) > 0 && len(deps[0].Statuses) > 0 && deps[0].Statuses[len(deps[0].Statuses)-1].State == "success" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no success status after the takeover: %+v", deps)
		}
	}
	if len(deps) != 1 {
		t.Fatalf("%d deployments, want the one made before the kill", len(deps))
	}
}

// TestChatAcrossTakeover: the leader is killed while Slack updates a
// rollout's message (Slack did it, the leader never learned): the
// successor updates the same message to applied, none is posted twice,
// and the webhook receives each verdict once, at most once more.
func TestChatAcrossTakeover(t *testing.T) {
	write := secretFiles(t)
	sl := slacktest.New("xoxb-replicas", time.Now, "deploys")
	defer sl.Close()
	hook := cloudeventtest.New([]byte("hook-key"), time.Now)
	defer hook.Close()
	r := startReplicas(t, 2, "--lease-duration", "2s", "--lease-renew", "500ms", "--external-url", "https://fdn.example.com",
		"--layers", "flux-system/layer-00,flux-system/layer-01,flux-system/layer-02",
		"--slack-token-file", write("slack", "xoxb-replicas"), "--slack-channel", "#deploys", "--slack-api-url", sl.URL,
		"--webhook-url", hook.URL, "--webhook-secret-file", write("hook", "hook-key"))
	old := r.leader(20 * time.Second)
	killed := make(chan struct{})
	var once sync.Once
	sl.Answering(func(method string) {
		if method == "chat.update" {
			once.Do(func() {
				_ = old.cmd.Process.Kill() // the PID this test started
				r.out(old, true)
				close(killed)
			})
		}
	})
	events := crashEvents(3, 3) // one rollout over three layers
	// The first layer's event alone, so that its message is posted while
	// applying; the others' applied updates it.
	acked := r.postAll(events[:1], nil)
	for deadline := time.Now().Add(30 * time.Second); len(sl.Messages("deploys")) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no message posted:\n%s", tail(old.logs.String(), 20))
		}
	}
	acked = append(acked, r.postAll(events[1:], nil)...)
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatalf("no message updated:\n%s", tail(old.logs.String(), 20))
	}
	_ = old.cmd.Wait()
	r.leader(20 * time.Second)
	r.converged(events, acked)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m, es := sl.Messages("deploys"), hook.Events()
		if len(m) > 0 && strings.HasPrefix(m[0].Text, "Applied") && len(es) > 0 && strings.HasSuffix(es[len(es)-1].Type(), ".applied") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not applied in Slack and the webhook after the takeover: %+v, %v", m, es)
		}
	}
	if m := sl.Messages("deploys"); len(m) != 1 {
		t.Fatalf("%d messages, want the one posted before the kill: %+v", len(m), m)
	}
	if n := hook.Repeats(); n > 1 {
		t.Fatalf("the webhook received %d repeats, want at most one after one crash", n)
	}
	for _, v := range [][]string{sl.Violations(), hook.Violations()} {
		if len(v) > 0 {
			t.Errorf("requests that break a contract: %q", v)
		}
	}
}

// TestClusterCatchUpAcrossTakeover: every replica reads the cluster and
// appends what it reads; the leader is killed, and while none leads the
// layers apply a new revision: the successor shows it (its inbox already
// held what the others read), from cluster state alone.
func TestClusterCatchUpAcrossTakeover(t *testing.T) {
	c := clustertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	w := c.NewWorld(t, "flux-system", now)
	rev1, rev2 := "main@sha1:"+strings.Repeat("1a", 20), "main@sha1:"+strings.Repeat("2b", 20)
	w.Source("fleet", rev1)
	layers := []string{"infra", "apps"}
	for _, l := range layers {
		w.Layer(clustertest.Layer{Name: l, Source: "fleet", Applied: rev1, Attempted: rev1,
			Ready: w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+rev1, time.Minute)})
	}
	bind(t, c, "fdn-reader")
	r := startReplicas(t, 2, "--lease-duration", "2s", "--lease-renew", "500ms", "--kubeconfig", c.KubeconfigFor(t, "fdn-reader"))
	shows := func(ch *child, rev string) bool {
		for _, l := range layers {
			if !loadkit.LayerApplied(http.DefaultClient, ch.url, rev[len("main@sha1:"):], "flux-system/"+l) {
				return false
			}
		}
		return true
	}
	for _, ch := range r.every() {
		for deadline := time.Now().Add(30 * time.Second); !shows(ch, rev1); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never shows the first revision from the cluster:\n%s", ch.url, tail(ch.logs.String(), 20))
			}
		}
	}
	old := r.leader(20 * time.Second)
	_ = old.cmd.Process.Kill() // the PID this test started
	r.out(old, true)
	_ = old.cmd.Wait()
	for _, l := range layers {
		w.SetStatus(l, rev2, rev2, w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+rev2, 0))
	}
	successor := r.leader(20 * time.Second)
	for deadline := time.Now().Add(30 * time.Second); !shows(successor, rev2); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the successor never shows what the cluster applied while none led:\n%s", tail(successor.logs.String(), 20))
		}
	}
}
