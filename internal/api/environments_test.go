package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/server"
)

// TestEnvironmentsAnswerFollowsChanges: an answer kept for the next
// request is made again once a rollout changed, a cluster moved to
// another environment, or a warning came; never served stale.
func TestEnvironmentsAnswerFollowsChanges(t *testing.T) {
	te := enginetest.Start(t, t.TempDir(), rollout.Config{StuckAfter: time.Hour}, time.Now, true)
	e := &env{engine: te.Engine}
	declared := "staging=stg;prod=prod"
	var warning string
	place := func() api.Placement {
		d, err := environments.Parse(declared)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := environments.New(d, nil)
		return api.Placement{Map: m, Clusters: m.Members()}
	}
	warnings := func() []string {
		if warning == "" {
			return nil
		}
		return []string{warning}
	}
	srv := httptest.NewServer(server.Routes(server.Parts{API: api.New(te.Engine, slog.New(slog.DiscardHandler), api.Options{Environments: place, Warnings: warnings})}))
	t.Cleanup(srv.Close)
	read := func() string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/environments")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body api.EnvironmentsResponse
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%d: %v", resp.StatusCode, err)
		}
		var b strings.Builder
		for _, env := range body.Environments {
			b.WriteString(env.Name + ":")
			for _, c := range env.Clusters {
				b.WriteString(" " + c.Cluster + "=" + c.State)
			}
			b.WriteString(";")
		}
		return b.String() + " " + strings.Join(body.Warnings, ",")
	}
	if got := read(); got != "staging: stg=unreported;prod: prod=unreported; " {
		t.Fatalf("before any rollout: %s", got)
	}
	if got := read(); got != "staging: stg=unreported;prod: prod=unreported; " {
		t.Fatalf("asked again: %s", got)
	}
	e.observe(t, "apps", "A", rollout.SignalProgressing, "stg")
	if got := read(); got != "staging: stg=applying;prod: prod=unreported; " {
		t.Fatalf("a rollout began: %s", got)
	}
	declared = "staging=stg,prod"
	if got := read(); got != "staging: prod=unreported stg=applying; " {
		t.Fatalf("prod moved to staging: %s", got)
	}
	warning = "blind"
	if got := read(); got != "staging: prod=unreported stg=applying; blind" {
		t.Fatalf("a warning: %s", got)
	}
}
