package ui_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
)

// archive settles n rollouts of 20 layers, one a minute before t0, every
// seventh failed, into the store under e.
func archive(t testing.TB, e *enginetest.Engine, n int) {
	t.Helper()
	var views []*rollout.View
	flush := func() {
		if err := e.DB.Commit(&rollout.Batch{Settle: views, At: t0}); err != nil {
			t.Fatal(err)
		}
		views = views[:0]
	}
	for i := range n {
		first := t0.Add(-time.Duration(i+1) * time.Minute)
		done := first.Add(time.Minute)
		v := &rollout.View{Cluster: "prod", Hash: fmt.Sprintf("%040x", i), Revision: fmt.Sprintf("main@sha1:%040x", i),
			Verdict: rollout.VerdictApplied, Terminal: true, Subject: fmt.Sprintf("Change %d", i),
			FirstSeen: first, LastSeen: done, Deadline: first.Add(30 * time.Minute), CompletedAt: &done, Summary: "applied on every layer"}
		if i%7 == 0 {
			v.Verdict, v.CompletedAt = rollout.VerdictFailed, nil
		}
		layers := make([]rollout.LayerView, 20)
		for j := range layers {
			layers[j] = rollout.LayerView{Name: fmt.Sprintf("flux-system/l%02d", j), State: rollout.LayerApplied, Revision: v.Revision, At: &done, Since: &first}
		}
		v.Layers = rollout.MakeLayers(layers)
		views = append(views, v)
		if len(views) == 500 {
			flush()
		}
	}
	if len(views) > 0 {
		flush()
	}
}

func serve(t testing.TB, e *enginetest.Engine) string {
	return serveUI(t, e, ui.Options{Now: func() time.Time { return t0 }})
}

var (
	hashRE = regexp.MustCompile(`<a class="hash" href="/ui/prod/([0-9a-f]{40})">`)
	nextRE = regexp.MustCompile(`<p class="more"><a href="([^"]+)">`)
)

// TestPagesWalkTheWholeList: following "older" from the first page visits
// every rollout once, newest first, live and settled, filtered or not.
func TestPagesWalkTheWholeList(t *testing.T) {
	e := enginetest.Start(t, t.TempDir(), rollout.Config{StuckAfter: 30 * time.Minute}, func() time.Time { return t0 }, true)
	archive(t, e, 260)
	base := serve(t, e)
	for _, c := range []struct {
		query string
		want  int
	}{{"/ui/", 260}, {"/ui/?verdict=failed", 38}, {"/ui/?verdict=failed&q=change+1", 15}, {"/ui/layers/flux-system/l03", 260}} {
		v := &env{t: t, url: base}
		var seen []string
		next := c.query
		pages := 0
		for next != "" {
			code, body, _ := v.get(nil, next)
			if code != http.StatusOK {
				t.Fatalf("%s: %d", next, code)
			}
			for _, m := range hashRE.FindAllStringSubmatch(body, -1) {
				seen = append(seen, m[1])
			}
			next = ""
			if m := nextRE.FindStringSubmatch(body); m != nil {
				next = html.UnescapeString(m[1])
			}
			if pages++; pages > 10 {
				t.Fatal("the pages do not end")
			}
		}
		if len(seen) != c.want {
			t.Fatalf("%q: %d rollouts over %d pages, want %d", c.query, len(seen), pages, c.want)
		}
		for i := 1; i < len(seen); i++ {
			if seen[i] <= seen[i-1] { // archive's hashes grow with age
				t.Fatalf("%q: %s after %s: not newest first, or twice", c.query, seen[i], seen[i-1])
			}
		}
	}
}

// BenchmarkListPage renders a page of 50 out of 10,000 rollouts: the first
// and one deep in the list (the cursor seeks, it does not skip).
func BenchmarkListPage(b *testing.B) {
	e := enginetest.Start(b, b.TempDir(), rollout.Config{StuckAfter: 30 * time.Minute}, func() time.Time { return t0 }, true)
	archive(b, e, 10000)
	base := serve(b, e)
	deep := fmt.Sprintf("/ui/?after=%d:%040x:prod", t0.Add(-8000*time.Minute).UnixNano(), 7999)
	for _, c := range []struct{ name, path string }{{"first", "/ui/"}, {"deep", deep}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(base + c.path)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}
