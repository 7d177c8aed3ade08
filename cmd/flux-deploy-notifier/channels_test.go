package main

import (
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent/cloudeventtest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/slack/slacktest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/teams/teamstest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// TestChannelsAcrossSIGKILL: the real binary with Slack, Teams and a
// signed webhook, killed while Slack updates the rollout's message to
// applied (Slack did it, the service never learned): restarted, it
// updates the same message again (one message per commit and cluster),
// and every channel has the verdict, each at most once more than due.
func TestChannelsAcrossSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	write := secretFiles(t)
	sl := slacktest.New("xoxb-serve", time.Now, "deploys")
	defer sl.Close()
	tm := teamstest.New(time.Now)
	defer tm.Close()
	hook := cloudeventtest.New([]byte("hook-key\n"), time.Now)
	defer hook.Close()
	token := []byte("channels-token")
	args := append(serviceArgs(t, t.TempDir(), token), "--default-cluster", "prod", "--external-url", "https://fdn.example.com",
		"--layers", "flux-system/layer-00,flux-system/layer-01",
		"--slack-token-file", write("slack", "xoxb-serve\n"), "--slack-channel", "#deploys", "--slack-api-url", sl.URL,
		"--teams-webhook-file", write("teams", tm.Hook("ops")+"\n"),
		"--webhook-url", hook.URL, "--webhook-secret-file", write("hook", "hook-key\n"))
	bin := buildBinary(t, true)
	first := startChild(t, bin, args...)
	events := crashEvents(2, 2)

	until := func(what string, logs func() string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s:\n%s", what, logs())
			}
		}
	}
	if code := post(http.DefaultClient, first.url, token, events[0]); code != http.StatusAccepted {
		t.Fatalf("event answered %d", code)
	}
	until("applying message", first.logs.String, func() bool {
		m := sl.Messages("deploys")
		return len(m) == 1 && strings.Contains(m[0].Text, "Applying")
	})

	var mu sync.Mutex
	killed := make(chan struct{})
	victim := first
	sl.Answering(func(method string) {
		mu.Lock()
		defer mu.Unlock()
		if method == "chat.update" && victim != nil {
			_ = victim.cmd.Process.Kill() // only the process this test started
			victim = nil
			close(killed)
		}
	})
	// The kill may come before the 202 is written: the dispatcher is
	// woken by the commit the answer waits for.
	if code := post(http.DefaultClient, first.url, token, events[1]); code != http.StatusAccepted && code != 0 {
		t.Fatalf("event answered %d", code)
	}
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatalf("no update of the message:\n%s", first.logs.String())
	}
	_ = first.cmd.Wait()

	second := startChild(t, bin, args...)
	until("applied in every channel", second.logs.String, func() bool {
		m, cards, es := sl.Messages("deploys"), tm.Cards("ops"), hook.Events()
		return len(m) == 1 && m[0].Updates >= 2 && len(cards) > 0 && len(es) == 2 &&
			strings.Contains(m[0].Text, "Applied") && strings.Contains(es[1].Type(), "applied")
	})
	m := sl.Messages("deploys")
	if len(m) != 1 || !strings.Contains(m[0].Text, "Applied "+events[1].hash[:7]+" on prod") {
		t.Fatalf("Slack: %+v, want one message, updated to applied", m)
	}
	if c := tm.Cards("ops"); len(c) > 2 || !strings.Contains(c[0].Text(), "Applied") {
		t.Fatalf("Teams: %+v, want the applied card, at most once more", c)
	}
	if hook.Repeats() > 1 {
		t.Fatalf("the webhook took %d repeats, want at most one after one crash", hook.Repeats())
	}
	for _, v := range [][]string{sl.Violations(), tm.Violations(), hook.Violations()} {
		if len(v) > 0 {
			t.Errorf("requests that break a contract: %q", v)
		}
	}
	if code, warnings := readyz(t, second.url); code != http.StatusOK || len(warnings) != 0 {
		t.Fatalf("/readyz %d %v", code, warnings)
	}
	resp, err := http.Get(second.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`fdn_deliveries_total{channel="slack",outcome="sent"}`, `fdn_deliveries_total{channel="teams",outcome="dead"} 0`, `fdn_deliveries_total{channel="webhook",outcome="sent"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A delivery is recorded after the channel answered: the page says
	// so once the service has recorded each.
	var page string
	until("every channel's delivery on the page", func() string { return page }, func() bool {
		resp, err := http.Get(second.url + "/ui/prod/" + events[1].hash)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
		return strings.Count(page, "delivered: applied") == 3
	})
	for _, want := range []string{"Shown elsewhere", "<td>Slack</td>", "<td>Teams</td>", "<td>Webhook</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the rollout's page does not say %q", want)
		}
	}
	if logs := first.logs.String() + second.logs.String(); strings.Contains(logs, "xoxb-serve") || strings.Contains(logs, "sig=") || strings.Contains(logs, "hook-key") {
		t.Error("a secret is logged")
	}
}

// secretFiles returns a function that writes a secret to a file of its
// own (a Secret's key mounted as a file) and returns its path.
func secretFiles(t *testing.T) func(name, content string) string {
	dir := t.TempDir()
	return func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

// TestChannelTable: every row of the channel table registers flags of its
// own, passes its checks with none given and is then not given, and, with
// its flags given, is given and makes a Deliverer and a label for the
// pages; the store keeps an outbox under each row's name, and the one
// dispatcher delivers it. A new channel is a package and a row: this test
// asks for the flags that give it.
func TestChannelTable(t *testing.T) {
	write := secretFiles(t)
	given := map[string][]string{
		"forge":   {"--github-token-file", write("github", "ghp_x\n"), "--github-repo", "acme/fleet"},
		"slack":   {"--slack-token-file", write("slack", "xoxb-x\n"), "--slack-channel", "#deploys"},
		"teams":   {"--teams-webhook-file", write("teams", "https://example.com/workflows/x?sig=y\n")},
		"webhook": {"--webhook-url", "https://hooks.example.com/fdn", "--webhook-secret-file", write("hook", "k\n")},
	}
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names := map[string]bool{}
	var specs []outbox.Channel
	for i, row := range channelRows() {
		alert := time.Minute
		f := newFlags("serve", func(string) string { return "" }, io.Discard)
		r := row(f, &forgeConfig{}, &alert)
		var own []string
		f.VisitAll(func(fl *flag.Flag) { own = append(own, fl.Name) })
		switch {
		case r.name == "" || names[r.name]:
			t.Fatalf("row %d: name %q, empty or taken", i, r.name)
		case len(own) == 0:
			t.Fatalf("%s: no flags", r.name)
		case r.check == nil || r.given == nil || r.open == nil || r.takes == nil || r.label == nil || r.record == "" || r.alertAfter == nil:
			t.Fatalf("%s: a part of the row is missing: %+v", r.name, r)
		case given[r.name] == nil:
			t.Fatalf("%s: the test does not know the flags that give it", r.name)
		}
		names[r.name] = true
		if err := r.check(); err != nil || r.given() {
			t.Fatalf("%s with no flag: given %v, check %v", r.name, r.given(), err)
		}
		if err := f.parse(given[r.name]); err != nil {
			t.Fatal(err)
		}
		if err := r.check(); err != nil || !r.given() {
			t.Fatalf("%s with %v: given %v, check %v", r.name, given[r.name], r.given(), err)
		}
		to, err := r.open(channelEnv{db: db, hc: http.DefaultClient, log: slog.New(slog.DiscardHandler), now: time.Now,
			sourceURL: func(string, string, string, string) (string, bool) { return "", false }})
		if err != nil || to == nil || to.Name() == "" {
			t.Fatalf("%s: deliverer %v, %v", r.name, to, err)
		}
		if r.label() == "" {
			t.Fatalf("%s: no label for the pages", r.name)
		}
		specs = append(specs, r.spec())
	}
	if err := db.SetChannels(specs...); err != nil {
		t.Fatal(err)
	}
	for name := range names {
		if _, err := db.Channel(name).Publications(); err != nil {
			t.Fatalf("%s's outbox: %v", name, err)
		}
	}
}
