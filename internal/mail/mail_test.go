package mail_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fsync"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail/smtptest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/templates"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var hashOf = enginetest.Hash

func ob(layer, label string, sec int, sig rollout.Signal, reason, msg string) rollout.Observation {
	return rollout.Observation{
		Cluster:  "prod",
		Emitter:  rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: layer},
		Revision: "main@sha1:" + hashOf(label), Hash: hashOf(label),
		At: t0.Add(time.Duration(sec) * time.Second), Signal: sig, Reason: reason, Message: msg,
	}
}

func succ(layer, label string, sec int) rollout.Observation {
	return ob(layer, label, sec, rollout.SignalSucceeded, "ReconciliationSucceeded", "Reconciliation finished in 1s, next run in 5m0s")
}

func pruneFailed(layer, label string, sec int) rollout.Observation {
	o := ob(layer, label, sec, rollout.SignalFailed, "PruneFailed",
		`delete failed, errors: ConfigMap/apps/old-config delete failed: configmaps "old-config" is forbidden: denied;`)
	o.Class, o.Objects = rollout.FailurePrune, []rollout.Object{{Kind: "ConfigMap", Namespace: "apps", Name: "old-config", Error: `configmaps "old-config" is forbidden: denied`}}
	return o
}

func progressing(layer, label string, sec int) rollout.Observation {
	return ob(layer, label, sec, rollout.SignalProgressing, "Progressing", "Deployment/apps/web configured")
}

// cleanRollout is what Flux sends for a commit that reaches three layers:
// the dependent layers wait first, so all three are known from the start.
func cleanRollout(label string, sec int) []rollout.Observation {
	wait := func(layer string) rollout.Observation {
		return ob(layer, label, sec, rollout.SignalWaiting, "DependencyNotReady", "Dependencies do not meet ready condition")
	}
	return []rollout.Observation{wait("platform"), wait("apps"), succ("infra", label, sec), succ("platform", label, sec+5), succ("apps", label, sec+9)}
}

type env struct {
	te    *enginetest.Engine
	disp  *mail.Dispatcher
	clock *enginetest.Clock
	logs  *syncbuf.Buffer
	reg   *prometheus.Registry
}

// start runs an engine on dir and a dispatcher sending to srv.
// smtpOptions is how the tests' SMTP server is reached: STARTTLS and AUTH
// PLAIN, as most relays are.
var smtpOptions = smtptest.Options{STARTTLS: true, User: "flux", Password: "s3cret-p4ss"}

func start(t *testing.T, dir string, srv *smtptest.Server) *env {
	t.Helper()
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"ops@example.com"}}
	te := enginetest.Start(t, dir, cfg, func() time.Time { return t0.Add(10 * time.Minute) }, true)
	r, err := mail.NewRenderer(templates.FS, "https://fdn.example.com")
	if err != nil {
		t.Fatal(err)
	}
	sender, err := mail.NewSMTP(mail.SMTPConfig{
		Host: "127.0.0.1", Port: srv.Port, TLS: "starttls", Auth: "plain",
		Username: smtpOptions.User, Password: smtpOptions.Password, From: "flux@example.com", TLSConfig: srv.ClientTLS,
		Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	c := enginetest.NewClock(t0.Add(10 * time.Minute))
	reg := prometheus.NewRegistry()
	d := mail.NewDispatcher(te.DB, sender, r, slog.New(slog.NewTextHandler(logs, nil)), c.Now, 5*time.Minute, reg)
	return &env{te: te, disp: d, clock: c, logs: logs, reg: reg}
}

func (e *env) submit(t *testing.T, times int, obs ...rollout.Observation) {
	t.Helper()
	for range times {
		for _, o := range obs {
			if err := e.te.Submit(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (e *env) flush() time.Time { return e.disp.Flush(context.Background()) }

func TestCleanRolloutAndPruneFailureOverSTARTTLS(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	e := start(t, t.TempDir(), srv)
	e.submit(t, 3, cleanRollout("R0", -600)...) // every event delivered three times
	e.flush()
	e.submit(t, 3, succ("infra", "R1", 1), succ("platform", "R1", 5), pruneFailed("apps", "R1", 9))
	e.flush()
	e.flush()

	want := []string{
		"[flux] applying " + hashOf("R0")[:7] + " on prod",
		"[flux] applied " + hashOf("R0")[:7] + " on prod in 9s",
		"[flux] applying " + hashOf("R1")[:7] + " on prod",
		"[flux] prune failed on prod: ConfigMap apps/old-config (" + hashOf("R1")[:7] + ")",
	}
	if got := srv.Subjects(); !slices.Equal(got, want) {
		t.Fatalf("subjects:\n got %q\nwant %q", got, want)
	}
	prune := srv.Messages()[3]
	body, _ := io.ReadAll(prune.Body)
	for _, s := range []string{"flux-system/apps", "old-config", "is forbidden: denied"} {
		if !strings.Contains(string(body), s) {
			t.Errorf("prune-failed mail does not name %q", s)
		}
	}
	if id := prune.Header.Get("Message-Id"); !strings.HasSuffix(id, "@flux-deploy-notifier>") {
		t.Errorf("Message-ID %q", id)
	}
	if strings.Contains(e.logs.String(), smtpOptions.Password) {
		t.Fatal("the SMTP password reached the log")
	}
	if pending, _ := e.te.DB.Pending(); len(pending) != 0 {
		t.Fatalf("%d mails left in the outbox", len(pending))
	}
}

func TestTransientFailureRetriesWithBackoff(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	srv.FailWith(func(n int) error {
		if n == 1 {
			return smtptest.Reply451
		}
		return nil
	})
	e := start(t, t.TempDir(), srv)
	e.submit(t, 1, progressing("infra", "R0", 0))
	next := e.flush()
	if len(srv.Messages()) != 0 {
		t.Fatal("a 451 was counted as delivered")
	}
	pending, _ := e.te.DB.Pending()
	if len(pending) != 1 || pending[0].Attempts != 1 || !strings.Contains(pending[0].LastError, "451") ||
		!next.Equal(e.clock.Now().Add(15*time.Second)) {
		t.Fatalf("after a 451: next %v, outbox %+v", next, pending)
	}
	e.flush() // not due yet
	if len(srv.Messages()) != 0 {
		t.Fatal("retried before the backoff")
	}
	e.clock.Add(15 * time.Second)
	if next := e.flush(); !next.IsZero() || len(srv.Messages()) != 1 {
		t.Fatalf("after the backoff: %d delivered, next %v", len(srv.Messages()), next)
	}
}

func TestPermanentFailureDeadLetters(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	srv.FailWith(func(int) error { return smtptest.Reply554 })
	e := start(t, t.TempDir(), srv)
	e.submit(t, 1, progressing("infra", "R0", 0))
	if next := e.flush(); !next.IsZero() {
		t.Fatalf("a 554 is scheduled for retry at %v", next)
	}
	dead, _ := e.te.DB.Dead()
	pending, _ := e.te.DB.Pending()
	if len(dead) != 1 || len(pending) != 0 || !strings.Contains(dead[0].LastError, "554") {
		t.Fatalf("dead %+v, pending %+v", dead, pending)
	}
	if c := strings.Count(e.logs.String(), "dead-lettered"); c != 1 {
		t.Fatalf("dead letter logged %d times", c)
	}
}

// TestServerDownThenRestart: the SMTP server is down while three rollouts
// complete, the service restarts in the middle, the server comes back:
// every due mail arrives exactly once.
func TestServerDownThenRestart(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	srv.Stop()
	dir := t.TempDir()
	e := start(t, dir, srv)
	e.submit(t, 2, cleanRollout("R1", 0)...)
	e.submit(t, 2, cleanRollout("R2", 60)...)
	if next := e.flush(); next.IsZero() || len(srv.Messages()) != 0 {
		t.Fatalf("server down: next retry %v, %d delivered", next, len(srv.Messages()))
	}
	e.te.Stop()

	e = start(t, dir, srv) // restart: the outbox and its backoff survive
	e.submit(t, 2, cleanRollout("R2", 60)...)
	e.submit(t, 2, cleanRollout("R3", 120)...)
	e.flush()
	srv.Restart()
	e.clock.Add(time.Hour)
	e.flush()
	e.flush()
	got := srv.Subjects()
	slices.Sort(got)
	var want []string
	for _, l := range []string{"R1", "R2", "R3"} {
		want = append(want, "[flux] applied "+hashOf(l)[:7]+" on prod in 9s", "[flux] applying "+hashOf(l)[:7]+" on prod")
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered:\n got %q\nwant %q", got, want)
	}
}

// TestSMTPDownTenMinutes: the SMTP server is down for ten minutes (time on
// the dispatcher's clock): the mails wait, retried with backoff; once they
// have waited past --mail-alert-after (5m here) they are reported stuck,
// by Warning and fdn_mails_stuck; when the server is back each arrives
// once and the report clears.
func TestSMTPDownTenMinutes(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	srv.Stop()
	e := start(t, t.TempDir(), srv)
	stuck := func() float64 {
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "fdn_mails_stuck" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no fdn_mails_stuck")
		return 0
	}
	down := e.clock.Now()
	e.submit(t, 1, cleanRollout("R1", 0)...)
	attempts := 0
	for next := e.flush(); ; next = e.flush() {
		attempts++
		if next.IsZero() {
			t.Fatal("nothing scheduled while the server is down")
		}
		waited := e.clock.Now().Sub(down)
		if w := e.disp.Warning(); waited <= 5*time.Minute && (w != "" || stuck() != 0) {
			t.Fatalf("reported stuck after %s: %q", waited, w)
		} else if waited > 5*time.Minute && (!strings.Contains(w, "2 mails undelivered for longer than 5m0s") || stuck() != 2) {
			t.Fatalf("not reported stuck after %s: %q, metric %v", waited, w, stuck())
		}
		if next.Sub(down) >= 10*time.Minute {
			break
		}
		e.clock.Add(next.Sub(e.clock.Now()))
	}
	if len(srv.Messages()) != 0 || attempts < 4 {
		t.Fatalf("%d delivered while down, %d attempts", len(srv.Messages()), attempts)
	}
	e.clock.Add(down.Add(10 * time.Minute).Sub(e.clock.Now()))
	srv.Restart()
	next := e.flush() // not due yet: the backoff holds
	if len(srv.Messages()) != 0 || next.Sub(down) < 10*time.Minute {
		t.Fatalf("sent before the backoff: %d, next %v", len(srv.Messages()), next)
	}
	e.clock.Add(next.Sub(e.clock.Now()))
	if next := e.flush(); !next.IsZero() {
		t.Fatalf("still scheduled after the server came back: %v", next)
	}
	got := srv.Subjects()
	slices.Sort(got)
	want := []string{"[flux] applied " + hashOf("R1")[:7] + " on prod in 9s", "[flux] applying " + hashOf("R1")[:7] + " on prod"}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want each once: %q", got, want)
	}
	if dead, _ := e.te.DB.Dead(); len(dead) != 0 {
		t.Fatalf("dead letters: %+v", dead)
	}
	if w := e.disp.Warning(); w != "" || stuck() != 0 {
		t.Fatalf("still reported stuck: %q", w)
	}
}

// TestOneConnectionPerBurst: a burst of mails reuses one SMTP connection.
func TestOneConnectionPerBurst(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	e := start(t, t.TempDir(), srv)
	e.submit(t, 1, cleanRollout("R1", 0)...)
	e.submit(t, 1, cleanRollout("R2", 60)...)
	e.flush()
	if n, c := len(srv.Messages()), srv.Connections(); n != 4 || c != 1 {
		t.Fatalf("%d mails over %d connections", n, c)
	}
}

// TestEventTextIsData: a commit subject and a Flux message cannot add a
// header, and HTML in them is escaped.
func TestEventTextIsData(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	e := start(t, t.TempDir(), srv)
	art := rollout.Observation{
		Cluster: "prod", Emitter: rollout.Emitter{Role: rollout.RoleSource, Kind: "GitRepository", Namespace: "flux-system", Name: "flux-system"},
		Revision: "main@sha1:" + hashOf("X"), Hash: hashOf("X"), At: t0, Signal: rollout.SignalArtifact,
		Subject: "fix\r\nBcc: attacker@example.com\r\nX-Evil: 1 <script>alert(1)</script>",
	}
	bad := ob("apps", "X", 5, rollout.SignalFailed, "ReconciliationFailed", "boom\r\nBcc: attacker@example.com <img src=x onerror=alert(1)>")
	e.submit(t, 1, art, bad)
	e.flush()
	msgs := srv.Messages()
	for i, m := range msgs {
		raw := m.Raw
		head := raw[:strings.Index(raw, "\r\n\r\n")]
		if strings.Contains(strings.ToLower(head), "\r\nbcc:") || strings.Contains(head, "\r\nX-Evil") {
			t.Fatalf("mail %d: event text added a header:\n%s", i, head)
		}
		html, err := m.Part("text/html")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(html, "<script>") || strings.Contains(html, "<img src=x") || !strings.Contains(html, "&lt;") {
			t.Fatalf("mail %d: HTML from an event was not escaped:\n%s", i, html)
		}
	}
	if len(msgs) != 2 {
		t.Fatalf("%d mails", len(msgs))
	}
}

func TestBadRecipientDeadLetters(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	e := start(t, t.TempDir(), srv)
	o := progressing("infra", "R0", 0)
	o.MailTo = []string{"nobody@invalid.example"}
	e.submit(t, 1, o)
	e.flush()
	dead, _ := e.te.DB.Dead()
	if len(srv.Messages()) != 1 || len(dead) != 1 || dead[0].Mail.To != "nobody@invalid.example" {
		t.Fatalf("delivered %d, dead %+v", len(srv.Messages()), dead)
	}
}

func TestDispatcherRunWakesOnMail(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	e := start(t, t.TempDir(), srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.disp.Run(ctx) }()
	defer func() { cancel(); <-done }()
	e.te.OnMail(e.disp.Wake)
	e.submit(t, 1, cleanRollout("R1", 0)...)
	deadline := time.Now().Add(20 * time.Second)
	for len(srv.Messages()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("dispatcher delivered %d of 2 mails", len(srv.Messages()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDirSender(t *testing.T) {
	// A resend after a crash rewrites the same file.
	writeToDir(t, t.TempDir(), "t", 2)
}

// writeToDir sends one mail with text to a Dir sender in dir, times times,
// and returns the one file it made.
func writeToDir(t *testing.T, dir, text string, times int) string {
	t.Helper()
	d, err := mail.NewDir(dir, "flux@localhost")
	if err != nil {
		t.Fatal(err)
	}
	r := mail.Rendered{Subject: "s", Text: text, HTML: "<p>h</p>", MessageID: mail.MessageID("k"), Date: t0, To: "dev@localhost"}
	for range times {
		for _, res := range d.Send(context.Background(), []mail.Rendered{r}) {
			if res.Err != nil {
				t.Fatal(res.Err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.eml"))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	return files[0]
}

// TestDirSenderSyncsOnceABurst: a burst's mails are reported sent only
// after one sync of the directory, once all of them are renamed into it,
// made the renames durable (without it a crash could lose a mail the
// outbox marked sent); when that sync fails every mail of the burst is
// transient, to be written again.
func TestDirSenderSyncsOnceABurst(t *testing.T) {
	dir := t.TempDir()
	d, err := mail.NewDir(dir, "flux@localhost")
	if err != nil {
		t.Fatal(err)
	}
	var syncs, want int
	var fail error
	d.SetDirSync(func(p string) error {
		syncs++
		if files, _ := filepath.Glob(filepath.Join(dir, "*.eml")); len(files) != want {
			t.Errorf("sync %d: %d mails renamed into the directory, want %d", syncs, len(files), want)
		}
		if fail != nil {
			return fail
		}
		return fsync.Dir(p)
	})
	burst := func(keys ...string) []mail.Result {
		want += len(keys)
		var msgs []mail.Rendered
		for _, k := range keys {
			msgs = append(msgs, mail.Rendered{Subject: k, Text: k, HTML: "<p>" + k + "</p>", MessageID: mail.MessageID(k), Date: t0, To: "dev@localhost"})
		}
		return d.Send(context.Background(), msgs)
	}
	for i, res := range burst("a", "b", "c") {
		if res.Err != nil {
			t.Fatalf("mail %d: %v", i, res.Err)
		}
	}
	if syncs != 1 {
		t.Fatalf("a burst of 3 mails synced the directory %d times, want 1", syncs)
	}
	fail = syscall.EIO
	for i, res := range burst("d", "e") {
		if res.Err == nil || !res.Retry || !errors.Is(res.Err, syscall.EIO) {
			t.Fatalf("mail %d of a burst whose directory sync failed: %+v, want a transient EIO", i, res)
		}
	}
	if syncs != 2 {
		t.Fatalf("%d directory syncs after two bursts, want 2", syncs)
	}
}

// TestDirSenderLeavesNoPageCache: a mail written to the directory is not
// kept in the page cache, where it would count against the pod's memory
// limit and push out the store's pages.
func TestDirSenderLeavesNoPageCache(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		t.Skip("on tmpfs the page cache is the file")
	}
	f, err := os.Open(writeToDir(t, dir, strings.Repeat("a long mail ", 2000), 1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pages := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&pages[0]))); errno != 0 {
		t.Fatal(errno)
	}
	cached := 0
	for _, p := range pages {
		cached += int(p & 1)
	}
	if cached > 0 {
		t.Errorf("%d of the mail's %d pages in the page cache, want none", cached, len(pages))
	}
}

// TestRunFinishesTheSendUnderWay: stopped while the SMTP server is taking
// the first mail of a burst, Run lets that send finish and records it (it
// does not go again after the restart), and leaves the rest of the burst
// waiting, untried.
func TestRunFinishesTheSendUnderWay(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	inData, release := make(chan struct{}), make(chan struct{})
	srv.FailWith(func(n int) error {
		if n == 1 {
			close(inData)
			<-release // a slow server: the reply comes after the stop
		}
		return nil
	})
	e := start(t, t.TempDir(), srv)
	e.submit(t, 1, cleanRollout("R1", 0)...) // applying and applied: one burst
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.disp.Run(ctx) }()
	select {
	case <-inData:
	case <-time.After(20 * time.Second):
		t.Fatal("the mail never reached the server")
	}
	cancel()
	close(release) // the server answers after the stop
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the send")
	}
	pending, err := e.te.DB.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if len(srv.Messages()) != 1 || len(pending) != 1 || pending[0].Attempts != 0 {
		t.Fatalf("%d delivered, waiting %+v: want the send under way delivered and recorded, the next untried", len(srv.Messages()), pending)
	}
}

// failingSent is the store with Sent failing: the mail went out, its
// record did not.
type failingSent struct {
	outbox.Mails
	calls int
}

func (f *failingSent) Sent(uint64, time.Time) error {
	f.calls++
	return errors.New("the store is unreachable")
}

// TestUnrecordedMailStopsTheBurst: when a sent mail cannot be recorded,
// the burst stops there: the store's failure repeats that one mail (same
// Message-ID) at the next flush, not every mail after it.
func TestUnrecordedMailStopsTheBurst(t *testing.T) {
	srv := smtptest.Start(t, smtpOptions)
	e := start(t, t.TempDir(), srv)
	e.submit(t, 1, cleanRollout("R0", -600)...)
	pending, err := e.te.DB.Pending()
	if err != nil || len(pending) < 2 {
		t.Fatalf("%d mails pending (%v), want a burst", len(pending), err)
	}
	sender, err := mail.NewSMTP(mail.SMTPConfig{
		Host: "127.0.0.1", Port: srv.Port, TLS: "starttls", Auth: "plain",
		Username: smtpOptions.User, Password: smtpOptions.Password, From: "flux@example.com", TLSConfig: srv.ClientTLS,
		Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := mail.NewRenderer(templates.FS, "https://fdn.example.com")
	if err != nil {
		t.Fatal(err)
	}
	box := &failingSent{Mails: e.te.DB}
	d := mail.NewDispatcher(box, sender, r, slog.New(slog.NewTextHandler(io.Discard, nil)), e.clock.Now, 5*time.Minute, prometheus.NewRegistry())
	d.Flush(context.Background())
	if n := len(srv.Messages()); n != 1 || box.calls != 1 {
		t.Fatalf("%d mails sent, %d recorded, of a burst of %d: want one sent, its record tried", n, box.calls, len(pending))
	}
	// The store again: the unrecorded mail goes again, with the same
	// Message-ID, and the rest once.
	e.flush()
	msgs := srv.Messages()
	if len(msgs) != len(pending)+1 || msgs[0].Header.Get("Message-Id") != msgs[1].Header.Get("Message-Id") {
		t.Fatalf("%d mails after the store came back, want %d, the first twice", len(msgs), len(pending)+1)
	}
}
