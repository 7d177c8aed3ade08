package environments_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var t0 = time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC)

// histories reads clusters' histories written newest first, as
// "stg-eu=c:applying b:failed a:applied"; a commit's rollout began at
// minute n of its letter (a=1), on every cluster, and ended a minute
// later. "applied!" is applied, then a failure after it; "cut" at the end
// says older rollouts exist.
func histories(t *testing.T, spec ...string) (clusters []string, h map[string]environments.History) {
	t.Helper()
	m := map[string]environments.History{}
	for _, s := range spec {
		cluster, list, _ := strings.Cut(s, "=")
		clusters = append(clusters, cluster)
		var hist environments.History
		for _, r := range strings.Fields(list) {
			if r == "cut" {
				hist.Cut = true
				continue
			}
			commit, verdict, _ := strings.Cut(r, ":")
			after := strings.HasSuffix(verdict, "!")
			verdict = strings.TrimSuffix(verdict, "!")
			began := t0.Add(time.Duration(commit[0]-'a'+1) * time.Minute)
			hash := strings.Repeat(commit, 40)
			v := &rollout.View{Cluster: cluster, Hash: hash, Revision: "main@sha1:" + hash, FirstSeen: began, LastSeen: began, Summary: verdict}
			if err := v.Verdict.UnmarshalText([]byte(verdict)); err != nil {
				t.Fatal(err)
			}
			if v.Verdict.Terminal() {
				end := began.Add(time.Minute)
				v.CompletedAt, v.Terminal = &end, true
			}
			if v.Verdict == rollout.VerdictFailed || after {
				at := began.Add(2 * time.Minute)
				v.Failures = []rollout.FailureView{{Layer: "apps", Reason: "HealthCheckFailed", At: at, LastAt: at, AfterApplied: after}}
			}
			hist.Rollouts = append(hist.Rollouts, v)
		}
		m[cluster] = hist
	}
	return clusters, m
}

func short(hash string) string { return hash[:1] }

func deploy(d *environments.Deploy) string {
	if d == nil {
		return "-"
	}
	return short(d.Commit)
}

// show writes a Status compactly: per environment its running commit and
// groups, per cluster its state, running, last applied, in flight and
// last failure; per pair the commits between with where they are not
// run.
func show(st environments.Status) string {
	var b strings.Builder
	for _, e := range st.Environments {
		fmt.Fprintf(&b, "%s running=%s", e.Name, deploy(e.Running))
		if e.Running != nil {
			fmt.Fprintf(&b, "@%s", e.Running.AppliedAt.Sub(t0))
		}
		for _, g := range e.Groups {
			c := "-"
			if g.Commit != "" {
				c = short(g.Commit)
			}
			fmt.Fprintf(&b, " [%s %s %s]", g.State, c, strings.Join(g.Clusters, ","))
		}
		b.WriteString("\n")
		for _, c := range e.Clusters {
			fmt.Fprintf(&b, "  %s %s running=%s last=%s flight=", c.Cluster, c.State, deploy(c.Running), deploy(c.LastApplied))
			for _, f := range c.InFlight {
				b.WriteString(short(f.Commit))
			}
			if f := c.LastFailure; f != nil {
				fmt.Fprintf(&b, " failure=%s/%s", short(f.Commit), f.Layer)
				if f.AfterApplied {
					b.WriteString("/after")
				}
			}
			b.WriteString("\n")
		}
	}
	for _, bt := range st.Between {
		fmt.Fprintf(&b, "%s>%s:", bt.Lower, bt.Higher)
		for _, p := range bt.Commits {
			fmt.Fprintf(&b, " %s(", short(p.Commit))
			for i, w := range p.Where {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "%s:%s", w.Cluster, w.Verdict)
			}
			fmt.Fprintf(&b, " not on %s)", strings.Join(p.NotRunOn, ","))
		}
		if !bt.Complete {
			b.WriteString(" incomplete")
		}
		if len(bt.Unknown) > 0 {
			fmt.Fprintf(&b, " unknown=%s", strings.Join(bt.Unknown, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestClusterState: a cluster's running commit is its newest applied one
// that no failed or in-flight newer rollout follows; superseded rollouts
// do not count; its last failure may be older than what it runs, or come
// after its rollout applied.
func TestClusterState(t *testing.T) {
	for _, tt := range []struct{ name, history, want string }{
		{"never reported", "", "never unreported running=- last=- flight="},
		{"applied", "b:applied a:applied", "x running running=b last=- flight="},
		{"applying over applied", "b:applying a:applied", "x applying running=- last=a flight=b"},
		{"superseded then applying", "c:applying b:superseded a:applied", "x applying running=- last=a flight=c"},
		{"superseded then applied", "c:applied b:superseded a:applied", "x running running=c last=- flight="},
		{"failure after success", "b:failed a:applied", "x failed running=- last=a flight= failure=b/apps"},
		{"failed then applying", "c:applying b:failed a:applied", "x applying running=- last=a flight=c failure=b/apps"},
		{"stuck", "c:applying b:stuck a:applied", "x applying running=- last=a flight=cb"},
		{"an older failure", "c:applied b:failed a:applied", "x running running=c last=- flight= failure=b/apps"},
		{"failed after it applied", "b:applied! a:applied", "x running running=b last=- flight= failure=b/apps/after"},
		{"none applied yet", "a:applying", "x applying running=- last=- flight=a"},
		{"only superseded", "a:superseded", "x none running=- last=- flight="},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := "x"
			if tt.history == "" {
				name = "never"
			}
			clusters, h := histories(t, name+"="+tt.history)
			m, _ := environments.New(nil, nil)
			got := show(m.Status(clusters, h))
			if line := strings.Split(got, "\n")[1]; strings.TrimSpace(line) != tt.want {
				t.Errorf("got  %s\nwant %s", strings.TrimSpace(line), tt.want)
			}
		})
	}
}

// TestStatus: environments in promotion order, each running one commit
// or split into groups, and what lies between two adjacent ones.
func TestStatus(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec []string
		want string
	}{{
		name: "promoted: nothing between; a cluster in none last, not compared",
		spec: []string{"stg=b:applied a:applied", "prod=b:applied a:applied", "lab=c:applied"},
		want: `staging running=b@3m0s [running b stg]
  stg running running=b last=- flight=
prod running=b@3m0s [running b prod]
  prod running running=b last=- flight=
lab running=c@4m0s [running c lab]
  lab running running=c last=- flight=
staging>prod:
`,
	}, {
		name: "two commits ahead, newest first, one failed",
		spec: []string{"stg=d:failed c:applied b:applied a:applied", "prod=b:applied a:applied"},
		want: `staging running=- [failed - stg]
  stg failed running=- last=c flight= failure=d/apps
prod running=b@3m0s [running b prod]
  prod running running=b last=- flight=
staging>prod: d(stg:failed not on prod) c(stg:applied not on prod)
`,
	}, {
		name: "a commit prod skipped, deployed inside a later one, counts as run",
		spec: []string{"stg=c:applied b:applied a:applied", "prod=c:applied a:applied"},
		want: `staging running=c@4m0s [running c stg]
  stg running running=c last=- flight=
prod running=c@4m0s [running c prod]
  prod running running=c last=- flight=
staging>prod:
`,
	}, {
		name: "superseded in staging: not listed; applying in prod: shown where",
		spec: []string{"stg=d:applied c:superseded b:applied a:applied", "prod=d:applying a:applied"},
		want: `staging running=d@5m0s [running d stg]
  stg running running=d last=- flight=
prod running=- [applying - prod]
  prod applying running=- last=a flight=d
staging>prod: d(prod:applying,stg:applied not on prod) b(stg:applied not on prod)
`,
	}, {
		name: "two clusters of one environment on different commits",
		spec: []string{"stg-eu=c:applied b:applied a:applied", "stg-us=b:applied a:applied",
			"prod-eu=b:applied a:applied", "prod-us=a:applied"},
		want: `staging running=- [running c stg-eu] [running b stg-us]
  stg-eu running running=c last=- flight=
  stg-us running running=b last=- flight=
prod running=- [running b prod-eu] [running a prod-us]
  prod-eu running running=b last=- flight=
  prod-us running running=a last=- flight=
staging>prod: c(stg-eu:applied not on prod-eu,prod-us) b(prod-eu:applied,stg-eu:applied,stg-us:applied not on prod-us)
`,
	}, {
		name: "a prod cluster that never reported is not counted, and named",
		spec: []string{"stg=b:applied a:applied", "prod=a:applied", "prod-new="},
		want: `staging running=b@3m0s [running b stg]
  stg running running=b last=- flight=
prod running=- [running a prod] [unreported - prod-new]
  prod running running=a last=- flight=
  prod-new unreported running=- last=- flight=
staging>prod: b(stg:applied not on prod,prod-new) unknown=prod-new
`,
	}, {
		name: "what prod runs is not in staging's history read: incomplete",
		spec: []string{"stg=c:applied b:applied cut", "prod=a:applied"},
		want: `staging running=c@4m0s [running c stg]
  stg running running=c last=- flight=
prod running=a@2m0s [running a prod]
  prod running running=a last=- flight=
staging>prod: c(stg:applied not on prod) b(stg:applied not on prod) incomplete
`,
	}, {
		name: "an environment running one commit since the last cluster applied it",
		spec: []string{"stg=a:applied", "prod-eu=a:applied", "prod-us=b:applied a:applied"},
		want: `staging running=a@2m0s [running a stg]
  stg running running=a last=- flight=
prod running=- [running a prod-eu] [running b prod-us]
  prod-eu running running=a last=- flight=
  prod-us running running=b last=- flight=
staging>prod:
`,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			clusters, h := histories(t, tt.spec...)
			declared, err := environments.Parse("staging=stg,stg-eu,stg-us;prod=prod,prod-eu,prod-us,prod-new")
			if err != nil {
				t.Fatal(err)
			}
			m, _ := environments.New(declared, nil)
			if got := show(m.Status(clusters, h)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
