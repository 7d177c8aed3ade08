package ui_test

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/templates"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type env struct {
	t     *testing.T
	e     *enginetest.Engine
	url   string
	clock *enginetest.Clock
}

// start runs an engine with the example rollouts (or obs) and the pages
// on a real HTTP server over loopback.
func start(t *testing.T, opts ui.Options, obs ...rollout.Observation) *env {
	t.Helper()
	return startWith(t, rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour}, func(*enginetest.Engine) ui.Options { return opts }, obs...)
}

// startWith is start with the engine's configuration and options made
// from the engine under test.
func startWith(t *testing.T, cfg rollout.Config, options func(*enginetest.Engine) ui.Options, obs ...rollout.Observation) *env {
	t.Helper()
	clock := enginetest.NewClock(t0.Add(time.Hour))
	e := enginetest.Start(t, t.TempDir(), cfg, clock.Now, true)
	if obs == nil {
		obs = enginetest.ExampleObservations(t0)
	}
	for _, o := range obs {
		if err := e.Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	opts := options(e)
	opts.Now = clock.Now
	return &env{t: t, e: e, url: serveUI(t, e, opts), clock: clock}
}

// serveUI serves the pages of e on a real HTTP server over loopback.
func serveUI(t testing.TB, e *enginetest.Engine, opts ui.Options) string {
	t.Helper()
	h, err := ui.New(e.Engine, uiFS(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Mount("/ui", h)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

func uiFS(t testing.TB) fs.FS {
	sub, err := fs.Sub(templates.UI, "ui")
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// get fetches a page as a browser would, and returns its status and body.
func (v *env) get(c *http.Client, path string, header ...string) (int, string, http.Header) {
	v.t.Helper()
	req, err := http.NewRequest(http.MethodGet, v.url+path, nil)
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if c == nil {
		c = noRedirects()
	}
	resp, err := c.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// liveHash is a revision after the examples, which tests roll out.
var liveHash = strings.Repeat("5e", 20)

// succeed submits that layer's success on liveHash, sec seconds into it.
func (v *env) succeed(layer string, sec int) {
	v.t.Helper()
	o := rollout.Observation{Cluster: "prod", Emitter: rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: layer},
		Revision: "main@sha1:" + liveHash, Hash: liveHash, At: t0.Add(50*time.Minute + time.Duration(sec)*time.Second),
		Signal: rollout.SignalSucceeded, Reason: "ReconciliationSucceeded", Message: "Reconciliation finished"}
	if err := v.e.Submit(context.Background(), o); err != nil {
		v.t.Fatal(err)
	}
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// example is the hash of an example rollout by the subject it starts with.
func example(t *testing.T, subject string) string {
	t.Helper()
	for _, o := range enginetest.ExampleObservations(t0) {
		if strings.HasPrefix(o.Subject, subject) {
			return o.Hash
		}
	}
	t.Fatalf("no example rollout %q", subject)
	return ""
}

func TestListShowsTheRollouts(t *testing.T) {
	v := start(t, ui.Options{})
	code, body, hdr := v.get(nil, "/ui/")
	if code != http.StatusOK {
		t.Fatalf("GET /ui/: %d\n%s", code, body)
	}
	for _, want := range []string{
		example(t, "Bump web")[:12], "Bump web to v1.4.2 (#412)", "Remove the legacy settings (#413)",
		`class="badge applied"`, `class="badge failed"`, `class="badge stuck"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the list does not show %q", want)
		}
	}
	// Newest first.
	if strings.Index(body, "#415") > strings.Index(body, "#412") {
		t.Error("the list is not newest first")
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
		hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("security headers: %v", hdr)
	}
	_, failed, _ := v.get(nil, "/ui/?verdict=failed")
	if !strings.Contains(failed, "#413") || strings.Contains(failed, "#412") {
		t.Errorf("verdict filter: %s", failed)
	}
	_, found, _ := v.get(nil, "/ui/?q="+example(t, "Raise web")[:8])
	if !strings.Contains(found, "#414") || strings.Contains(found, "#413") {
		t.Errorf("hash search")
	}
	_, bySubject, _ := v.get(nil, "/ui/?q=LEGACY")
	if !strings.Contains(bySubject, "#413") || strings.Contains(bySubject, "#414") {
		t.Errorf("subject search")
	}
	if code, _, _ := v.get(nil, "/ui/?verdict=green"); code != http.StatusBadRequest {
		t.Errorf("an unknown verdict filter: %d, want 400", code)
	}
	if code, _, _ := v.get(nil, "/ui/?after=nonsense"); code != http.StatusBadRequest {
		t.Errorf("a malformed cursor: %d, want 400", code)
	}
}

var rowRE = regexp.MustCompile(`<g class="row ([a-z]+)">\s*<text class="name" x="4" y="\d+" dy="14">([^<]+)</text>`)

func TestRolloutPage(t *testing.T) {
	v := start(t, ui.Options{})
	prune := example(t, "Remove the legacy")
	code, body, _ := v.get(nil, "/ui/prod/"+prune)
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, body)
	}
	for _, want := range []string{"PruneFailed", "ConfigMap apps/old-config", "ValidatingAdmissionPolicy", `href="/ui/layers/flux-system/apps"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the failed rollout's page does not show %q", want)
		}
	}
	rows := rowRE.FindAllStringSubmatch(body, -1)
	var names []string
	for _, r := range rows {
		names = append(names, r[2]+" "+r[1])
	}
	// One bar per expected layer, in the order they began (dependsOn).
	want := []string{"flux-system/infra applied", "flux-system/platform applied", "flux-system/apps failed"}
	if strings.Join(names, ", ") != strings.Join(want, ", ") {
		t.Errorf("timeline rows %v, want %v", names, want)
	}
	if strings.Contains(body, `class="now"`) || strings.Contains(body, "live.js") {
		t.Error("a final rollout's page is live")
	}
	_, stuck, _ := v.get(nil, "/ui/prod/"+example(t, "Recovered"))
	if !strings.Contains(stuck, "Holding it") || !strings.Contains(stuck, `class="now"`) && !strings.Contains(stuck, "stuck") {
		t.Errorf("the stuck rollout's page does not say what holds it")
	}
	// Supersession both ways: R2 was superseded by R3.
	health := example(t, "Raise web")
	if !strings.Contains(body, `<dt>Superseded by</dt><dd><a class="hash" href="/ui/prod/`+health+`">`) {
		t.Error("the superseded rollout does not link its superseder")
	}
	if _, r3, _ := v.get(nil, "/ui/prod/"+health); !strings.Contains(r3, `<dt>Supersedes</dt><dd><a class="hash" href="/ui/prod/`+prune+`">`) {
		t.Error("the superseding rollout does not link what it superseded")
	}
	if code, body, _ := v.get(nil, "/ui/prod/"+strings.Repeat("0", 40)); code != http.StatusNotFound || !strings.Contains(body, "Not found") {
		t.Errorf("an unknown rollout: %d", code)
	}
	// A release's failure: named, with what helm-controller did next, and
	// the release a row of its own under its layer.
	_, helm, _ := v.get(nil, "/ui/prod/"+example(t, "Set web's log level"))
	for _, want := range []string{"HelmRelease/apps/web", "then: rolled back to v4: the cluster runs the previous release", "↳ apps/web", "logLevel must be one of"} {
		if !strings.Contains(helm, want) {
			t.Errorf("the page of a release's failure does not show %q", want)
		}
	}
	code, layer, _ := v.get(nil, "/ui/layers/flux-system/apps")
	if code != http.StatusOK || !strings.Contains(layer, "#413") || !strings.Contains(layer, "PruneFailed") {
		t.Errorf("the layer page: %d\n%s", code, layer)
	}
}

// TestLivePageAsksToBeRefreshed: a live rollout's page carries the wait
// URL, which answers once the rollout's verdict is final.
func TestLivePageAsksToBeRefreshed(t *testing.T) {
	v := start(t, ui.Options{})
	// A revision after the examples, applying on two of the three layers.
	hash := liveHash
	step := func(layer string, sec int) { v.succeed(layer, sec) }
	step("infra", 0)
	step("platform", 30)
	_, body, _ := v.get(nil, "/ui/prod/"+hash)
	if !strings.Contains(body, `data-wait="/ui/prod/`+hash+`/wait"`) || !strings.Contains(body, `src="/ui/static/live.js"`) ||
		!strings.Contains(body, `class="now"`) {
		t.Fatalf("the live page does not refresh itself:\n%s", body)
	}
	code, js, hdr := v.get(nil, "/ui/static/live.js")
	if code != http.StatusOK || !strings.Contains(js, "DOMParser") || !strings.Contains(hdr.Get("Content-Type"), "javascript") {
		t.Fatalf("live.js: %d %s", code, hdr.Get("Content-Type"))
	}
	done := make(chan string, 1)
	go func() {
		_, verdict, _ := v.get(nil, "/ui/prod/"+hash+"/wait")
		done <- verdict
	}()
	step("apps", 60)
	if got := <-done; got != "applied" {
		t.Fatalf("wait answered %q, want applied", got)
	}
	if _, body, _ := v.get(nil, "/ui/prod/"+hash); strings.Contains(body, "data-wait") {
		t.Fatal("the applied rollout's page still refreshes itself")
	}
}

func TestPagesNeedTheTokenWhenSet(t *testing.T) {
	v := start(t, ui.Options{Token: []byte("s3cret"), TrustHeader: "X-Auth-Request-Email"})
	hash := example(t, "Bump web")
	code, body, hdr := v.get(nil, "/ui/prod/"+hash)
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/ui/login?next=") || strings.Contains(body, "Bump web") {
		t.Fatalf("without a session: %d %s", code, hdr.Get("Location"))
	}
	req, _ := http.NewRequest(http.MethodGet, v.url+"/ui/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a client that is not a browser: %d, want 401", resp.StatusCode)
	}
	if code, body, _ := v.get(nil, "/ui/", "Authorization", "Bearer s3cret"); code != http.StatusOK || !strings.Contains(body, "#412") {
		t.Fatalf("with the bearer token: %d", code)
	}
	if code, _, _ := v.get(nil, "/ui/", "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Fatalf("with a wrong bearer token: %d", code)
	}
	if code, _, _ := v.get(nil, "/ui/", "X-Auth-Request-Email", "dev@example.com"); code != http.StatusOK {
		t.Fatalf("through the auth proxy: %d", code)
	}
	_, login, _ := v.get(nil, "/ui/login?next=/ui/prod/"+hash)
	if strings.Contains(login, "Bump web") || !strings.Contains(login, `name="next" value="/ui/prod/`+hash) {
		t.Fatal("the login page shows data, or forgets where to go")
	}

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	post := func(token, next string) (*http.Response, string) {
		resp, err := browser.PostForm(v.url+"/ui/login", url.Values{"token": {token}, "next": {next}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := post("guess", "/ui/"); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "#412") {
		t.Fatalf("a wrong token logs in: %d", resp.StatusCode)
	}
	resp, body = post("s3cret", "/ui/prod/"+hash)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Bump web to v1.4.2") {
		t.Fatalf("after logging in, the page asked for: %d\n%s", resp.StatusCode, body)
	}
	raw := resp.Request.Response.Header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui/", "Max-Age="} {
		if !strings.Contains(raw, attr) {
			t.Errorf("session cookie %q lacks %s", raw, attr)
		}
	}
	if strings.Contains(raw, "Secure") {
		t.Errorf("session cookie %q is Secure over plain http", raw)
	}
	if code, _, _ := v.get(browser, "/ui/"); code != http.StatusOK {
		t.Fatalf("with the session: %d", code)
	}
	// A forged or expired session is no session.
	u, _ := url.Parse(v.url + "/ui/")
	cookie := jar.Cookies(u)[0]
	if code, _, _ := v.get(nil, "/ui/", "Cookie", cookie.Name+"="+cookie.Value+"x"); code != http.StatusSeeOther {
		t.Fatalf("a tampered session: %d", code)
	}
	v.clock.Add(13 * time.Hour)
	if code, _, _ := v.get(nil, "/ui/", "Cookie", cookie.Name+"="+cookie.Value); code != http.StatusSeeOther {
		t.Fatalf("an expired session: %d", code)
	}
	// Guessing is slowed: after ten wrong tokens in a minute, even the right
	// one waits for the next minute.
	v.clock.Add(time.Minute)
	for range 9 { // one wrong token was tried above, this minute's are new
		post("guess", "/ui/")
	}
	post("guess", "/ui/")
	if resp, _ := post("s3cret", "/ui/"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the eleventh attempt in a minute: %d", resp.StatusCode)
	}
	v.clock.Add(time.Minute)
	// Logging in never sends the browser to another site.
	if resp, _ := post("s3cret", "//evil.example/ui/"); resp.Request.URL.Host != u.Host || resp.Request.URL.Path != "/ui/" {
		t.Fatalf("next led to %s", resp.Request.URL)
	}
}

// TestFluxTextIsEscaped: what notification-controller relays is text from
// any tenant's repository; on the pages it stays text.
func TestFluxTextIsEscaped(t *testing.T) {
	hostile := `<script>alert(1)</script><img src=x onerror=alert(2)><a href="javascript:alert(3)">x</a><svg onload=alert(4)>`
	obs := enginetest.ExampleObservations(t0)
	for i := range obs {
		obs[i].Message += hostile
		if obs[i].Subject != "" {
			obs[i].Subject += hostile
		}
		obs[i].Reason += "<b>"
	}
	named := obs[len(obs)-1]
	named.Emitter.Name = `evil<script>alert(5)</script>`
	obs = append(obs, named)
	v := start(t, ui.Options{}, obs...)
	for _, path := range []string{"/ui/", "/ui/prod/" + example(t, "Remove the legacy"), "/ui/prod/" + named.Hash, "/ui/layers/flux-system/apps"} {
		_, body, _ := v.get(nil, path)
		for _, raw := range []string{"<script>alert", "<img src=x", `href="javascript:`, "<svg onload", "<b>"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s carries %q unescaped", path, raw)
			}
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s does not show the hostile text as text", path)
		}
	}
}

// TestRolloutPageSaysWhoWasTold: the mails of a rollout, with what became
// of each.
func TestRolloutPageSaysWhoWasTold(t *testing.T) {
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"team@example.com"}}
	v := startWith(t, cfg, func(e *enginetest.Engine) ui.Options { return ui.Options{Mails: e.DB.MailLog} })
	e := v.e
	prune := example(t, "Remove the legacy")
	qs, err := e.DB.Pending()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Mail.View != nil && q.Mail.View.Hash == prune && q.Mail.Kind == rollout.MailApplying {
			if err := e.DB.Sent(q.Seq, t0.Add(10*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, body, _ := v.get(nil, "/ui/prod/"+prune)
	for _, want := range []string{"prune-failed flux-system/apps ConfigMap apps/old-config", "team@example.com",
		"delivered 2026-11-30 12:10:00 UTC", "waiting"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page's mails do not say %q", want)
		}
	}
}

// TestRolloutPageSaysWhatTheForgeShows: each channel's record of the
// verdict (one with none is not shown), delivered or refused with the
// channel's message.
func TestRolloutPageSaysWhatTheForgeShows(t *testing.T) {
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour}
	v := startWith(t, cfg, func(e *enginetest.Engine) ui.Options {
		// Slack is configured, and takes none of these verdicts.
		all := []rollout.Verdict{rollout.VerdictApplying, rollout.VerdictApplied, rollout.VerdictFailed, rollout.VerdictStuck, rollout.VerdictSuperseded}
		if err := e.DB.SetChannels(outbox.ForgeChannel(), outbox.Channel{Name: "slack", Skip: all}); err != nil {
			t.Fatal(err)
		}
		return ui.Options{Channels: []ui.Channel{
			{Name: "GitHub", Record: "deployment", Publication: e.DB.Channel("forge").Publication},
			{Name: "Slack", Record: "message", Publication: e.DB.Channel("slack").Publication},
		}}
	})
	e := v.e
	prune := example(t, "Remove the legacy")
	k := rollout.Key{Cluster: "prod", Hash: prune}
	if _, body, _ := v.get(nil, "/ui/prod/"+prune); strings.Contains(body, "Shown elsewhere") {
		t.Fatal("the page shows a forge record before there is one")
	}
	if err := e.DB.Commit(&rollout.Batch{Published: []rollout.Published{{Key: k, Verdict: rollout.VerdictFailed, At: t0}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		set  func(*outbox.Publication)
		want []string
	}{
		{func(p *outbox.Publication) {}, []string{"Shown elsewhere", `<td>GitHub</td>`, `<td>failed</td>`, `<span class="mail waiting">waiting</span>`}},
		{func(p *outbox.Publication) {
			p.Attempts, p.NextAttempt, p.LastError = 2, t0.Add(time.Minute), "503 Service Unavailable: <b>down</b>"
		},
			[]string{"retrying: 2 attempts, next 2026-11-30 12:01:00 UTC", "503 Service Unavailable: &lt;b&gt;down&lt;/b&gt;"}},
		{func(p *outbox.Publication) { p.Dead, p.Attempts, p.LastError = true, 3, "404 Not Found: Not Found" },
			[]string{"dead-lettered after 3 attempts", "404 Not Found: Not Found"}},
		{func(p *outbox.Publication) {
			p.Dead, p.SentSeq, p.Sent, p.Ref, p.LastError = false, p.Seq, p.Verdict, "1042", ""
		},
			[]string{"delivered: failed", "deployment 1042"}},
	} {
		if err := e.DB.Channel("forge").UpdatePublication(k, c.set); err != nil {
			t.Fatal(err)
		}
		_, body, _ := v.get(nil, "/ui/prod/"+prune)
		for _, want := range c.want {
			if !strings.Contains(body, want) {
				t.Errorf("the page's forge record does not say %q", want)
			}
		}
		if strings.Contains(body, "<td>Slack</td>") {
			t.Error("the page shows a Slack record where there is none")
		}
	}
}

// TestArtifactNamedByItsCommit: an OCI rollout is named on the pages by
// the commit its artifact was built from, not by its digest, which the
// rollout page shows beside it.
func TestArtifactNamedByItsCommit(t *testing.T) {
	digest, commit := strings.Repeat("d1", 32), strings.Repeat("c0", 20)
	o := rollout.Observation{Cluster: "prod", Emitter: rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"},
		Revision: "latest@sha256:" + digest, Hash: digest, Origin: "main@sha1:" + commit, OriginHash: commit,
		At: t0, Signal: rollout.SignalSucceeded, Reason: "ReconciliationSucceeded", Message: "Reconciliation finished"}
	v := start(t, ui.Options{}, o)
	for _, path := range []string{"/ui/", "/ui/prod/" + digest, "/ui/layers/flux-system/apps"} {
		_, body, _ := v.get(nil, path)
		if !strings.Contains(body, ">"+commit[:7]+"<") || strings.Contains(body, ">"+digest[:7]+"<") {
			t.Errorf("%s does not name the rollout by its commit %s", path, commit[:7])
		}
	}
	if _, body, _ := v.get(nil, "/ui/prod/"+digest); !strings.Contains(body, "latest@sha256:"+digest) {
		t.Error("the rollout page does not show the artifact")
	}
}

// TestListShowsTheClusters: with clusters given, the list page has a table
// of them: each with its environment, its state as a word, its layers
// while read, what registers it and why it is not read, its name a link
// to its rollouts, and a cluster name escaped as any text is.
func TestListShowsTheClusters(t *testing.T) {
	clusters := []ui.Cluster{
		{Name: "hub", From: "its own", State: "read", Layers: 12},
		{Name: "prod-eu", Environment: "prod", From: "Secret fdn/prod-eu", State: "failing", Layers: 85, Detail: "reading the cluster fails since 2026-12-07T10:00:00Z"},
		{Name: "qa", From: "Secret fdn/qa", State: "not-read", Detail: "the kubeconfig does not parse"},
		{Name: "dev<b>", From: "Secret fdn/dev", State: "elsewhere"},
	}
	v := start(t, ui.Options{Clusters: func() []ui.Cluster { return clusters }})
	_, body, _ := v.get(nil, "/ui/")
	for _, want := range []string{
		`<h2>Clusters</h2>`, `<a href="/ui/?cluster=hub">hub</a>`, `class="badge cluster-read">read</span>`, "<td>12</td>",
		`<td>prod</td>`, `class="badge cluster-failing">failing</span>`, "<td>85</td>", "reading the cluster fails since",
		`class="badge cluster-not-read">not read</span>`, "the kubeconfig does not parse", "Secret fdn/qa",
		`class="badge cluster-elsewhere">read by another replica</span>`, "dev&lt;b&gt;",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the list does not show %q", want)
		}
	}
	if strings.Contains(body, "dev<b>") {
		t.Error("a cluster's name unescaped")
	}
	_, none, _ := start(t, ui.Options{}).get(nil, "/ui/")
	if strings.Contains(none, "<h2>Clusters</h2>") {
		t.Error("a clusters table without clusters given (events only)")
	}
}
