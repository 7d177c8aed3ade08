package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// environmentsLine is GET /environments in a line per environment and
// one per pair: each cluster's state and running commit, and the commits
// between with the clusters that have not run them.
func environmentsLine(r *api.EnvironmentsResponse) string {
	var b strings.Builder
	short := func(c string) string { return c[:min(len(c), 4)] }
	for _, e := range r.Environments {
		fmt.Fprintf(&b, "%s:", e.Name)
		if e.Running != nil {
			fmt.Fprintf(&b, " all=%s", short(e.Running.Commit))
		}
		for _, c := range e.Clusters {
			fmt.Fprintf(&b, " %s=%s", c.Cluster, c.State)
			if c.Running != nil {
				fmt.Fprintf(&b, "/%s", short(c.Running.Commit))
			}
		}
		b.WriteString("\n")
	}
	for _, bt := range r.Between {
		fmt.Fprintf(&b, "%s>%s:", bt.Lower, bt.Higher)
		for _, p := range bt.Commits {
			fmt.Fprintf(&b, " %s(not on %s)", short(p.Commit), strings.Join(p.NotRunOn, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func getEnvironments(t *testing.T, url string) (*api.EnvironmentsResponse, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body api.EnvironmentsResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
	}
	return &body, resp.StatusCode
}

// TestEnvironments: GET /environments on both stores, --environments
// placing clusters known by events alone and one declared that never
// reported; a cluster in none its own environment, last; on PostgreSQL a
// second replica answers the same.
func TestEnvironments(t *testing.T) {
	for _, store := range []string{"bbolt", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			token := []byte("hmac-token")
			if err := os.WriteFile(filepath.Join(dir, "token"), token, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--listen", "127.0.0.1:0", "--hmac-token-file", filepath.Join(dir, "token"),
				"--environments", "staging=stg-eu,stg-us;prod=prod-eu,prod-us"}
			var urls []string
			if store == "postgres" {
				if testing.Short() {
					t.Skip("runs a real PostgreSQL")
				}
				args = append(args, "--postgres", pgtest.Start(t).NewDatabase(t), "--smtp-addr", "127.0.0.1:1")
				for i := range 2 {
					urls = append(urls, startServe(t, nil, append(args, "--data-dir", filepath.Join(dir, fmt.Sprint(i)))...))
				}
			} else {
				urls = append(urls, startServe(t, nil, append(args, "--data-dir", dir)...))
			}
			a, b, c := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
			now := time.Now().UTC().Add(-time.Minute)
			var events []flux.Event
			deploy := func(cluster, hash string, sec int, platform string) {
				events = append(events, deployed(cluster, "main@sha1:"+hash, now.Add(time.Duration(sec)*time.Second), platform)...)
			}
			deploy("stg-eu", a, 0, "ReconciliationSucceeded")
			deploy("stg-us", a, 0, "ReconciliationSucceeded")
			deploy("prod-eu", a, 5, "ReconciliationSucceeded")
			deploy("stg-eu", b, 10, "ReconciliationSucceeded")
			deploy("stg-us", b, 10, "ReconciliationSucceeded")
			deploy("stg-eu", c, 20, "HealthCheckFailed")
			deploy("lab", c, 20, "ReconciliationSucceeded")
			if err := postEvents(context.Background(), &http.Client{Timeout: 10 * time.Second}, urls[0], token, events); err != nil {
				t.Fatal(err)
			}
			want := `staging: stg-eu=failed stg-us=running/bbbb
prod: prod-eu=running/aaaa prod-us=unreported
lab: all=cccc lab=running/cccc
staging>prod: cccc(not on prod-eu,prod-us) bbbb(not on prod-eu,prod-us)
`
			for _, url := range urls {
				var got string
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					r, status := getEnvironments(t, url+"/environments")
					if got = environmentsLine(r); status == http.StatusOK && got == want {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s/environments (%d):\n%s\nwant\n%s", url, status, got, want)
					}
				}
			}
			// One source's rollouts alone: these came by events that name
			// none.
			r, status := getEnvironments(t, urls[0]+"/environments?source=GitRepository/flux-system/flux-system")
			if got := environmentsLine(r); status != http.StatusOK || r.Source != "GitRepository/flux-system/flux-system" ||
				!strings.HasPrefix(got, "staging: stg-eu=unreported stg-us=unreported\n") {
				t.Errorf("one source (%d): %s", status, got)
			}
		})
	}
}
