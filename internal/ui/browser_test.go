package ui_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
)

// browser starts headless Chromium (Debian's chromium; make test installs
// it and sets FDN_REQUIRE_BROWSER, so that there a missing browser fails
// instead of skipping) and returns a context that drives one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("FDN_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium is not installed")
		}
		t.Skip("chromium is not installed (make test installs it)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("no-first-run", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	// The first call starts the browser, which lives as long as its
	// context: no timeout on that one.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs steps in the tab, for at most 30 s.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// value runs one action that reads something, for at most 30 s.
func value[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestInBrowser(t *testing.T) {
	ctx := browser(t)
	hostile := `<script>window.pwned=1</script><img src=x onerror="window.pwned=2"><a id="js" href="javascript:window.pwned=3">x</a><svg onload="window.pwned=4"></svg>`
	obs := enginetest.ExampleObservations(t0)
	for i := range obs {
		if obs[i].Subject != "" {
			obs[i].Subject += hostile
		}
		obs[i].Message += hostile
	}
	evil := obs[len(obs)-1]
	evil.Emitter.Name = `evil<img src=x onerror="window.pwned=5">`
	obs = append(obs, evil)
	v := startWith(t, rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour}, func(e *enginetest.Engine) ui.Options {
		return ui.Options{Environments: func(string) (environments.Status, error) {
			hs, err := e.Histories()
			if err != nil {
				return environments.Status{}, err
			}
			declared, _ := environments.Parse("staging=staging;production=prod")
			m, _ := environments.New(declared, nil)
			return m.Status([]string{"prod", "staging"}, hs), nil
		}}
	}, obs...)
	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("list", func(t *testing.T) {
		do(t, ctx, chromedp.Navigate(v.url+"/ui/"))
		text := value(t, ctx, chromedp.Text(chromedp.CSS("table.rollouts")))
		for _, want := range []string{"Bump web to v1.4.2 (#412)", "Remove the legacy settings (#413)", "applied", "failed", "stuck"} {
			if !strings.Contains(text, want) {
				t.Errorf("the list shows %q, not %q", text, want)
			}
		}
	})
	t.Run("failed rollout", func(t *testing.T) {
		do(t, ctx, chromedp.Navigate(v.url+"/ui/prod/"+example(t, "Remove the legacy")))
		failures := value(t, ctx, chromedp.Text(chromedp.CSS("table.failures")))
		names := value(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("svg.timeline g.row text.name")].map(e => e.textContent)`))
		if !strings.Contains(failures, "ConfigMap apps/old-config") || !strings.Contains(failures, "PruneFailed") {
			t.Errorf("the failures table says %q", failures)
		}
		if strings.Join(names, ",") != "flux-system/infra,flux-system/platform,flux-system/apps" {
			t.Errorf("timeline rows %v, want one per expected layer in dependsOn order", names)
		}
		bars := value(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.timeline rect.bar").length`))
		if bars != 3 {
			t.Errorf("%d bars, want 3", bars)
		}
	})
	t.Run("environments, linked from every page", func(t *testing.T) {
		do(t, ctx, chromedp.Navigate(v.url+"/ui/prod/"+example(t, "Remove the legacy")), chromedp.Click(chromedp.CSS(`header nav a[href="/ui/environments"]`)),
			chromedp.WaitVisible(chromedp.CSS("#env-production")))
		staging := value(t, ctx, chromedp.Text(chromedp.CSS("#env-staging")))
		prod := value(t, ctx, chromedp.Text(chromedp.CSS("#env-production")))
		between := value(t, ctx, chromedp.Text(chromedp.CSS("#between-staging-production")))
		if !strings.Contains(staging, "unreported") || !strings.Contains(prod, "prod") || !strings.Contains(between, "production has run everything staging deployed") {
			t.Errorf("staging %q\nproduction %q\nbetween %q", staging, prod, between)
		}
	})
	t.Run("hostile text stays inert", func(t *testing.T) {
		for _, path := range []string{"/ui/", "/ui/environments", "/ui/prod/" + example(t, "Remove the legacy"), "/ui/prod/" + evil.Hash, "/ui/layers/flux-system/apps"} {
			do(t, ctx, chromedp.Navigate(v.url+path), chromedp.WaitReady(chromedp.CSS("body")))
			pwned := value(t, ctx, chromedp.Evaluate[bool](`"pwned" in window`))
			scripts := value(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("main script, main img, main svg[onload], main a[href^='javascript:']").length`))
			if pwned || scripts != 0 {
				t.Errorf("%s: hostile text ran (pwned %v) or became markup (%d elements)", path, pwned, scripts)
			}
		}
		if n := dialogs.Load(); n != 0 {
			t.Errorf("%d dialogs opened", n)
		}
	})
	t.Run("live rollout turns applied without a reload", func(t *testing.T) {
		hash := liveHash
		step := func(layer string, sec int) { v.succeed(layer, sec) }
		step("infra", 0)
		step("platform", 30)
		step("evil<img src=x onerror=\"window.pwned=5\">", 40)
		do(t, ctx, chromedp.Navigate(v.url+"/ui/prod/"+hash))
		verdict := value(t, ctx, chromedp.Text(chromedp.CSS("#verdict")))
		value(t, ctx, chromedp.Evaluate[string](`window.marker = "same page"`))
		if verdict != "applying" {
			t.Fatalf("verdict %q before the last layer", verdict)
		}
		step("apps", 60)
		do(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#verdict.applied`)))
		marker := value(t, ctx, chromedp.Evaluate[string](`window.marker`))
		if marker != "same page" {
			t.Fatal("the page was reloaded")
		}
	})
}

// TestLoginInBrowser: with a verdict token, a browser is sent to the login
// form, which shows no data; the token logs it in, and logging out ends it.
func TestLoginInBrowser(t *testing.T) {
	ctx := browser(t)
	v := start(t, ui.Options{Token: []byte("s3cret")})
	hash := example(t, "Bump web")
	do(t, ctx, chromedp.Navigate(v.url+"/ui/prod/"+hash), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)))
	url := value(t, ctx, chromedp.Location())
	body := value(t, ctx, chromedp.Text(chromedp.CSS("body")))
	if !strings.Contains(url, "/ui/login") || strings.Contains(body, "Bump web") {
		t.Fatalf("without logging in: at %s, showing %q", url, body)
	}
	do(t, ctx, chromedp.SendKeys(chromedp.CSS(`input[name=token]`), "s3cret"), chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS(`#verdict`)))
	url = value(t, ctx, chromedp.Location())
	body = value(t, ctx, chromedp.Text(chromedp.CSS("main")))
	if !strings.HasSuffix(url, "/ui/prod/"+hash) || !strings.Contains(body, "Bump web to v1.4.2") {
		t.Fatalf("after logging in: at %s, showing %q", url, body)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`header button`)), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.Navigate(v.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)))
	body = value(t, ctx, chromedp.Text(chromedp.CSS("body")))
	if strings.Contains(body, "Bump web") {
		t.Fatal("after logging out the list still shows")
	}
}
