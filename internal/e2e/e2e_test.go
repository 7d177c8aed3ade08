//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/forgetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/slack/slacktest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail/smtptest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// rig is what every scenario shares: one cluster, the Flux controllers, the
// artifact server, the SMTP server and the service's binary.
type rig struct {
	c    *clustertest.Cluster
	flux *Flux
	arts *Artifacts
	smtp *smtptest.Server
	pg   *pgtest.Server
	bin  string
}

// TestFlux runs every scenario against the real controllers, in parallel:
// each has its own namespace, GitRepository and Kustomizations, and two
// instances of the service with their own Provider and Alert, each mailing
// its own recipient: one reads that namespace of the cluster, the other
// has events only.
func TestFlux(t *testing.T) {
	bin, err := BuildService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := clustertest.Start(t)
	r := &rig{c: c, flux: StartFlux(t, c), arts: ServeArtifacts(t), smtp: smtptest.Start(t, smtptest.Options{}), pg: pgtest.Start(t), bin: bin}
	scenarios := []struct {
		name string
		run  func(t *testing.T, w *world)
	}{
		{"clean", cleanRollout},
		{"prune", pruneFailure},
		{"prune-disabled", pruneDisabled},
		{"health", healthCheckFailure},
		{"superseded", supersededWaitsForHealthCheck},
		{"canceled", supersededCancelsHealthCheck},
		{"no-change", noChange},
		{"suspended", suspendedTier},
		{"down", downDuringRollout},
		{"down-two-commits", downDuringTwoCommits},
		{"lost-between-commits", eventsLostBetweenCommits},
		{"restart", restartMidRollout},
		{"replicas", replicasLeaderKilled},
		{"no-success-event", noSuccessEvent},
		{"stuck", stuckBehindHealthCheck},
		{"helm", helmReleases},
		{"helm-down", helmDown},
		{"helm-wait", helmWait},
		{"helm-chart", helmChartFromCommit},
		{"helm-silent", helmSilent},
		{"helm-rollback", helmRollbackStalls},
		{"helm-uninstall", helmUninstallStalls},
		{"forge", forgeDeployments},
		{"oci", ociArtifacts},
		{"hub", hubOfTwoClusters},
		{"environments", environmentsOfTwoClusters},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, r.world(t, sc.name))
		})
	}
}

// tiers are the layers of every scenario, each depending on the one before.
var tiers = []string{"infra", "platform", "apps"}

// world is one scenario's namespace: a repository with three tiers of
// Kustomizations chained by dependsOn, and two instances of the service:
// svc reads the cluster, evt has events only (with the tiers in --layers).
type world struct {
	*rig
	ns         string
	repo       *Repo
	svc        *Service
	evt        *Service
	stuckAfter time.Duration // of both instances; zero: the default
	releaseNS  []string      // whose HelmReleases the Alerts send; none: ns
	silent     bool          // the Alerts send no HelmRelease's events (Options.SilentReleases)
	// github, when set, is the contract server both instances show their
	// verdicts in: svc in the repository the GitRepository names, evt
	// (which cannot read it) in acme/events.
	github *forgetest.GitHub
	// slack, when set, is the Slack stand-in both instances show their
	// verdicts in: svc in #<ns>, evt in #<ns>-events.
	slack *slacktest.Server
	// inferLayers starts evt without --layers: it knows the tiers from
	// their events alone.
	inferLayers bool
}

func (r *rig) world(t *testing.T, name string) *world {
	ns := "e2e-" + name
	r.c.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n")
	return &world{rig: r, ns: ns, repo: NewRepo(t, r.c, r.arts, ns, "fleet")}
}

// tier is how a scenario sets up one Kustomization.
type tier struct {
	wait    bool   // health checks (spec.wait)
	timeout string // spec.timeout, default 1m; kustomize-controller raises anything under 30s to 30s
	suspend bool
	shard   string // the kustomize-controller shard (feature gates), default none
}

// start publishes the first commit, creates the tiers and the service, and
// waits until the commit is applied everywhere.
func (w *world) start(t *testing.T, f files, opts map[string]tier) Commit {
	t.Helper()
	r0 := w.repo.Publish(t, f)
	svc := Options{StuckAfter: w.stuckAfter, ReleaseNamespaces: w.releaseNS, SilentReleases: w.silent}
	var layers []string
	for _, n := range tiers {
		layers = append(layers, w.ns+"/"+n)
	}
	evt := Options{EventsOnly: true, Layers: layers, StuckAfter: w.stuckAfter, ReleaseNamespaces: w.releaseNS, SilentReleases: w.silent}
	if w.inferLayers {
		evt.Layers = nil
	}
	if w.github != nil {
		tok := filepath.Join(t.TempDir(), "github-token")
		if err := os.WriteFile(tok, []byte(githubToken), 0o600); err != nil {
			t.Fatal(err)
		}
		svc.GitHubURL, svc.GitHubTokenFile = w.github.URL, tok
		evt.GitHub, evt.GitHubURL, evt.GitHubTokenFile = "acme/events", w.github.URL, tok
	}
	if w.slack != nil {
		tok := filepath.Join(t.TempDir(), "slack-token")
		if err := os.WriteFile(tok, []byte(slackToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		svc.SlackURL, svc.SlackChannel, svc.SlackTokenFile = w.slack.URL, "#"+w.ns, tok
		evt.SlackURL, evt.SlackChannel, evt.SlackTokenFile = w.slack.URL, "#"+w.ns+"-events", tok
	}
	w.svc = StartService(t, w.c, w.bin, w.ns, w.smtp.Addr, svc)
	w.evt = StartService(t, w.c, w.bin, w.ns, w.smtp.Addr, evt)
	for i, name := range tiers {
		w.applyTier(t, i, opts[name])
	}
	w.awaitApplied(t, r0, tiers...)
	return r0
}

func (w *world) applyTier(t *testing.T, i int, o tier) {
	t.Helper()
	name := tiers[i]
	deps := ""
	if i > 0 {
		deps = "\n  dependsOn: [{name: " + tiers[i-1] + "}]"
	}
	if o.timeout == "" {
		o.timeout = "1m"
	}
	labels := ""
	if o.shard != "" {
		labels = "\n  labels: {" + ShardLabel + ": " + o.shard + "}"
	}
	// A long interval: no heartbeat interferes with a scenario, every event
	// comes from a new commit or a retry.
	w.c.ApplyYAML(t, fmt.Sprintf(`apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: %s
  namespace: %s%s
spec:
  interval: 1h
  retryInterval: 20s
  timeout: %s
  path: ./%s
  prune: true
  wait: %v
  suspend: %v
  sourceRef: {kind: %s, name: %s}%s
`, name, w.ns, labels, o.timeout, name, o.wait, o.suspend, w.repo.Kind, w.repo.Name, deps))
}

// files are the manifests of a commit, by path in the repository.
type files map[string]string

// base is every tier's namespace and a ConfigMap whose data is version.
func (w *world) base(version string) files {
	f := files{}
	for _, tier := range tiers {
		f[tier+"/namespace.yaml"] = "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + w.ns + "-" + tier + "}\n"
		f[tier+"/settings.yaml"] = w.configMap(tier, "settings", "", version)
	}
	return f
}

// configMap is a ConfigMap in a tier's namespace; meta is extra metadata
// lines (labels, annotations).
func (w *world) configMap(tier, name, meta, version string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s-%s\n%sdata: {version: %q}\n",
		name, w.ns, tier, meta, version)
}

func (f files) with(path, content string) files {
	out := maps.Clone(f)
	out[path] = content
	return out
}

func (f files) without(paths ...string) files {
	out := maps.Clone(f)
	for _, p := range paths {
		delete(out, p)
	}
	return out
}

// Mail labels: a subject without the "[flux] " prefix, the cluster and the
// duration, which vary.
var durationInSubject = regexp.MustCompile(` in [0-9.]+(ms|s|m|h)[0-9.a-z]*`)

func mailLabel(subject string) string {
	s := strings.TrimPrefix(subject, "[flux] ")
	s = strings.Replace(s, " on "+Cluster, "", 1)
	return durationInSubject.ReplaceAllString(s, "")
}

func applying(c Commit) string { return "applying " + c.Hash[:7] }
func applied(c Commit) string  { return "applied " + c.Hash[:7] }

func (w *world) failed(tier, reason string, c Commit) string {
	return fmt.Sprintf("failed: %s/%s %s (%s)", w.ns, tier, reason, c.Hash[:7])
}

// mails are the labels of the mails an instance sent, sorted.
func (w *world) mails(svc *Service) []string {
	var out []string
	for _, m := range w.smtp.Messages() {
		if slices.Contains(m.To, svc.MailTo) {
			out = append(out, mailLabel(m.Header.Get("Subject")))
		}
	}
	slices.Sort(out)
	return out
}

// expectMails checks the mails of the instance that reads the cluster.
func (w *world) expectMails(t *testing.T, want ...string) {
	t.Helper()
	w.awaitMails(t, w.svc, want...)
}

// awaitMails waits until exactly want has been delivered from svc and its
// outbox is empty, then stops it (SIGTERM) and checks that nothing more was
// sent: no more, no fewer mails than want.
func (w *world) awaitMails(t *testing.T, svc *Service, want ...string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := w.mails(svc)
		empty, err := svc.OutboxEmpty()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got, want) && empty {
			break
		}
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Fatalf("%s: unexpected mail %q\ngot:  %q\nwant: %q", svc.MailTo, g, got, want)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: mails after 90s:\ngot:  %q\nwant: %q (outbox empty: %v)", svc.MailTo, got, want, empty)
		}
		time.Sleep(250 * time.Millisecond)
	}
	svc.Stop()
	if got := w.mails(svc); !slices.Equal(got, want) {
		t.Fatalf("%s: mails changed at shutdown:\ngot:  %q\nwant: %q", svc.MailTo, got, want)
	}
	t.Logf("%s: %q", svc.MailTo, want)
}

// verdict is what an instance is expected to answer for a commit.
type verdict struct {
	c    Commit
	want rollout.Verdict
}

// expectEventsOnly checks the events-only instance, after the one that
// reads the cluster has finished: each terminal verdict is reached, each
// other one (applying, or unknown: no evidence) holds then, and exactly
// want was mailed. Any other verdict fails the test.
func (w *world) expectEventsOnly(t *testing.T, verdicts []verdict, want ...string) {
	t.Helper()
	for _, v := range verdicts {
		if v.want.Terminal() {
			w.evt.AwaitVerdict(t, v.c, v.want, time.Minute)
			continue
		}
		got, err := w.evt.Verdict(v.c.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil && v.want != rollout.VerdictUnknown || got != nil && got.Verdict != v.want {
			t.Fatalf("events only, %s: want %s, got %s", v.c.Hash[:7], v.want, dump(got))
		}
	}
	w.awaitMails(t, w.evt, want...)
}

// expectWait runs the pipeline's `wait` and checks its exit code.
func (w *world) expectWait(t *testing.T, c Commit, code int, extra ...string) {
	t.Helper()
	got, out, err := w.svc.Wait(c, extra...)
	if err != nil {
		t.Fatal(err)
	}
	if got != code {
		t.Fatalf("wait %s %v: exit %d, want %d\n%s", c.Hash[:7], extra, got, code, out)
	}
	t.Logf("wait %s %v: exit %d\n%s", c.Hash[:7], extra, got, out)
}

// kustomization reads a tier's Kustomization.
func (w *world) kustomization(t *testing.T, tier string) *unstructured.Unstructured {
	t.Helper()
	k, err := w.readKustomization(tier)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// readKustomization is kustomization for another goroutine than the test's.
func (w *world) readKustomization(tier string) (*unstructured.Unstructured, error) {
	ri, err := w.c.ResourceFor("kustomize.toolkit.fluxcd.io/v1", "Kustomization", w.ns)
	if err != nil {
		return nil, err
	}
	return ri.Get(context.Background(), tier, metav1.GetOptions{})
}

func lastApplied(k *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
	return s
}

// awaitApplied waits for the applied verdict of c, and checks that it is
// true: each of the tiers named has applied c, as Flux itself reports in
// the Kustomization's status (written before the event that says so).
func (w *world) awaitApplied(t *testing.T, c Commit, tiers ...string) *rollout.View {
	t.Helper()
	v := w.svc.AwaitVerdict(t, c, rollout.VerdictApplied, 2*time.Minute)
	for _, n := range tiers {
		if got := lastApplied(w.kustomization(t, n)); got != c.Revision {
			t.Fatalf("applied verdict for %s while %s's lastAppliedRevision is %s", c.Hash[:7], n, got)
		}
	}
	return v
}

// awaitCluster polls until every tier named has applied c, as Flux itself
// reports in the Kustomizations' status.
func (w *world) awaitCluster(t *testing.T, c Commit, names ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, n := range names {
		for lastApplied(w.kustomization(t, n)) != c.Revision {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not apply %s within 2m", n, c.Hash[:7])
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// object reads an object of a tier's namespace; nil when it does not exist.
func (w *world) object(t *testing.T, apiVersion, kind, tier, name string) *unstructured.Unstructured {
	t.Helper()
	ri, err := w.c.ResourceFor(apiVersion, kind, w.ns+"-"+tier)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ri.Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// 1. A clean rollout over three tiers.
func cleanRollout(t *testing.T, w *world) {
	r0 := w.start(t, w.base("0"), nil)
	r1 := w.repo.Publish(t, w.base("1"))
	v := w.awaitApplied(t, r1, tiers...)
	if v.ExpectedFrom != rollout.ExpectedFromCluster || v.Layers.Len() != 3 {
		t.Fatalf("applied on %d layers expected from %s, want the 3 tiers from the cluster\n%s", v.Layers.Len(), v.ExpectedFrom, dump(v))
	}
	for _, l := range v.Layers.All() {
		if l.State != rollout.LayerApplied {
			t.Fatalf("layer %s is %s in an applied verdict", l.Name, l.State)
		}
	}
	w.expectWait(t, r1, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1))
	w.expectEventsOnly(t, []verdict{{r0, rollout.VerdictApplied}, {r1, rollout.VerdictApplied}},
		applying(r0), applied(r0), applying(r1), applied(r1))
}

const (
	githubToken = "ghs_e2e-token"
	slackToken  = "xoxb-e2e-token"
)

// forgeDeployments: real Flux rolls out a commit that applies and one
// that fails its health check; in GitHub (the contract server) each
// instance ends with one deployment per commit in the cluster's
// environment, whose last status is the verdict: success, then the
// earlier one inactive, and failure. Events only, the same. In Slack (the
// stand-in) each instance's channel ends with one message per commit,
// updated in place to its verdict, and one reply in the failed one's
// thread.
func forgeDeployments(t *testing.T, w *world) {
	w.showInGitHub(t)
	w.slack = slacktest.New(slackToken, time.Now, w.ns, w.ns+"-events")
	t.Cleanup(w.slack.Close)
	f0 := w.base("0")
	r0 := w.start(t, f0, map[string]tier{"platform": {wait: true, timeout: "30s"}})
	r1 := w.repo.Publish(t, w.base("1"))
	w.awaitApplied(t, r1, tiers...)
	r2 := w.repo.Publish(t, w.base("1").with("platform/web.yaml", w.deployment("platform")))
	w.svc.AwaitVerdict(t, r2, rollout.VerdictFailed, 2*time.Minute)
	w.evt.AwaitVerdict(t, r2, rollout.VerdictFailed, 2*time.Minute)
	want := map[string][]string{r0.Hash: {"success", "inactive"}, r1.Hash: {"success"}, r2.Hash: {"failure"}}
	for _, repo := range []string{"acme/cluster", "acme/events"} {
		var got map[string][]string
		deadline := time.Now().Add(time.Minute)
		for {
			got = map[string][]string{}
			n := 0
			for _, d := range w.github.Deployments(repo) {
				n++
				if d.Environment != Cluster || d.Task != "deploy" {
					t.Fatalf("%s: deployment %+v: want environment %s, task deploy", repo, d, Cluster)
				}
				var states []string
				for _, s := range d.Statuses {
					states = append(states, s.State)
				}
				got[d.SHA] = states
			}
			last := func(s []string) string {
				if len(s) == 0 {
					return ""
				}
				return s[len(s)-1]
			}
			done := n == len(want)
			for h, states := range want {
				done = done && last(got[h]) == last(states)
			}
			if done {
				if n != len(got) {
					t.Fatalf("%s: two deployments of one commit: %v", repo, got)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: deployments %v, want the last statuses of %v", repo, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// r0 went applying → success, then inactive when r1 succeeded;
		// never a failure, and r2 never a success.
		if slices.Contains(got[r0.Hash], "failure") || slices.Contains(got[r2.Hash], "success") {
			t.Fatalf("%s: statuses %v", repo, got)
		}
	}
	w.expectSlack(t, w.ns, map[string]string{r0.Hash: "Applied", r1.Hash: "Applied", r2.Hash: "Failed"})
	w.expectSlack(t, w.ns+"-events", map[string]string{r0.Hash: "Applied", r1.Hash: "Applied", r2.Hash: "Failed"})
}

// expectSlack waits until channel shows one message per commit of want,
// its verdict's (the headline), and one reply in each failed one's
// thread; no message posted twice, no request against Slack's contract.
func (w *world) expectSlack(t *testing.T, channel string, want map[string]string) {
	t.Helper()
	var msgs []slacktest.Message
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		msgs = w.slack.Messages(channel)
		top, replies := map[string]string{}, map[string]int{}
		byTS := map[string]string{}
		for _, m := range msgs {
			if m.ThreadTS == "" {
				for h := range want {
					if strings.Contains(m.Text, " "+h[:7]+" on ") {
						if _, twice := top[h]; twice {
							t.Fatalf("#%s: two messages of %s: %+v", channel, h, msgs)
						}
						top[h], byTS[m.TS] = strings.Fields(m.Text)[0], h
					}
				}
			}
		}
		for _, m := range msgs {
			if h, ok := byTS[m.ThreadTS]; ok {
				replies[h]++
			}
		}
		done := len(top) == len(want) && len(msgs) == len(want)+len(replies)
		for h, v := range want {
			wantReplies := 0
			if v == "Failed" {
				wantReplies = 1
			}
			done = done && top[h] == v && replies[h] == wantReplies
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("#%s: messages %v (replies %v) of %d, want %v and a reply to each failure", channel, top, replies, len(msgs), want)
		}
	}
	if v := w.slack.Violations(); len(v) > 0 {
		t.Fatalf("requests against Slack's contract: %q", v)
	}
}

// showInGitHub makes both instances show their verdicts in GitHub (the
// contract server): the GitRepository names acme/cluster on its host, so
// the instance that reads the cluster shows its rollouts there from the
// URL alone; the events-only one in acme/events.
func (w *world) showInGitHub(t *testing.T) {
	w.github = forgetest.StartGitHub(t, githubToken, time.Now, "acme/cluster", "acme/events")
	w.c.ApplyYAML(t, fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: %s, namespace: %s}
spec:
  interval: 1h
  url: ssh://git@127.0.0.1/acme/cluster.git
  ref: {branch: main}
`, w.repo.Name, w.ns))
}

// 2. A ValidatingAdmissionPolicy denies the deletion of a protected
// ConfigMap the commit removed from the last tier; an ordinary ConfigMap
// removed from another tier is deleted. The verdict is failed, naming the
// protected object and the policy's message, and not the ordinary one.
func pruneFailure(t *testing.T, w *world) {
	policy := w.protectConfigMaps(t)
	protected := w.configMap("apps", "protected", "  labels: {protect: \"true\"}\n", "0")
	f0 := w.base("0").with("apps/protected.yaml", protected).with("platform/ordinary.yaml", w.configMap("platform", "ordinary", "", "0"))
	r0 := w.start(t, f0, nil)
	w.awaitPolicy(t)

	r1 := w.repo.Publish(t, f0.without("apps/protected.yaml", "platform/ordinary.yaml"))
	v := w.svc.AwaitVerdict(t, r1, rollout.VerdictFailed, 2*time.Minute)
	if len(v.Failures) != 1 {
		t.Fatalf("%d failures, want 1\n%s", len(v.Failures), dump(v))
	}
	f := v.Failures[0]
	obj := rollout.Object{Kind: "ConfigMap", Namespace: w.ns + "-apps", Name: "protected"}
	if f.Layer != w.ns+"/apps" || f.Reason != "PruneFailed" || len(f.Objects) != 1 ||
		f.Objects[0].Kind != obj.Kind || f.Objects[0].Namespace != obj.Namespace || f.Objects[0].Name != obj.Name ||
		!strings.Contains(f.Objects[0].Error, "ValidatingAdmissionPolicy '"+policy+"'") ||
		!strings.Contains(f.Objects[0].Error, "ConfigMaps labelled protect=true may not be deleted") {
		t.Fatalf("failure does not name the protected ConfigMap and the policy's message:\n%s", dump(v))
	}
	if strings.Contains(dump(v), "ordinary") {
		t.Fatalf("the ordinary ConfigMap, which was deleted, is named:\n%s", dump(v))
	}
	if w.object(t, "v1", "ConfigMap", "platform", "ordinary") != nil {
		t.Fatal("the ordinary ConfigMap was not pruned")
	}
	if w.object(t, "v1", "ConfigMap", "apps", "protected") == nil {
		t.Fatal("the protected ConfigMap was deleted: the policy did not hold")
	}
	if got := lastApplied(w.kustomization(t, "apps")); got != r0.Revision {
		t.Fatalf("apps lastAppliedRevision %s, Flux keeps the old revision after a prune failure", got)
	}
	w.expectWait(t, r1, 1)
	prune := fmt.Sprintf("prune failed: ConfigMap %s-apps/protected (%s)", w.ns, r1.Hash[:7])
	w.expectMails(t, applying(r0), applied(r0), applying(r1), prune)
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictFailed}}, applying(r0), applied(r0), applying(r1), prune)
	// The mail names the Kustomization, the object and Flux's reason.
	body := w.mailText(t, prune)
	for _, want := range []string{
		"Kustomization: " + w.ns + "/apps",
		"Object:        ConfigMap " + w.ns + "-apps/protected",
		"ValidatingAdmissionPolicy '" + policy + "' with binding '" + policy + "' denied request: ConfigMaps labelled protect=true may not be deleted",
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("the prune-failed mail does not say %q:\n%s", want, body)
		}
	}
}

// protectConfigMaps makes a ValidatingAdmissionPolicy that denies deleting
// a ConfigMap labelled protect=true in the apps tier's namespace, and
// returns its name.
func (w *world) protectConfigMaps(t *testing.T) string {
	policy := w.ns + "-protect-configmaps"
	w.c.ApplyYAML(t, fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["configmaps"]}
  validations:
  - expression: "!has(oldObject.metadata.labels) || !('protect' in oldObject.metadata.labels) || oldObject.metadata.labels['protect'] != 'true'"
    message: ConfigMaps labelled protect=true may not be deleted
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec:
  policyName: %[1]s
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: %[2]s-apps}
`, policy, w.ns))
	return policy
}

// mailText is the text part of the scenario's mail with label.
func (w *world) mailText(t *testing.T, label string) string {
	t.Helper()
	for _, m := range w.smtp.Messages() {
		if slices.Contains(m.To, w.svc.MailTo) && mailLabel(m.Header.Get("Subject")) == label {
			text, err := m.Part("text/plain")
			if err != nil {
				t.Fatal(err)
			}
			return text
		}
	}
	t.Fatalf("no mail %q", label)
	return ""
}

// awaitPolicy polls until the admission policy denies deleting a protected
// ConfigMap: policies take effect asynchronously.
func (w *world) awaitPolicy(t *testing.T) {
	t.Helper()
	ri, err := w.c.ResourceFor("v1", "ConfigMap", w.ns+"-apps")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := ri.Delete(context.Background(), "protected", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy does not deny the deletion after 1m: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// 3. An object marked kustomize.toolkit.fluxcd.io/prune: disabled is
// removed from the repository: Flux skips it, the rollout is applied.
func pruneDisabled(t *testing.T, w *world) {
	kept := w.configMap("apps", "kept", "  annotations: {kustomize.toolkit.fluxcd.io/prune: disabled}\n", "0")
	f0 := w.base("0").with("apps/kept.yaml", kept)
	r0 := w.start(t, f0, nil)
	r1 := w.repo.Publish(t, f0.without("apps/kept.yaml"))
	w.awaitApplied(t, r1, tiers...)
	if w.object(t, "v1", "ConfigMap", "apps", "kept") == nil {
		t.Fatal("the prune-disabled ConfigMap was deleted")
	}
	w.expectWait(t, r1, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1))
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictApplied}}, applying(r0), applied(r0), applying(r1), applied(r1))
}

// deployment never becomes ready: no controller-manager runs.
func (w *world) deployment(tier string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s-%s}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.invalid/web:1}]
`, w.ns, tier)
}

// 4. A tier with health checks applies a Deployment that never becomes
// ready: failed with HealthCheckFailed.
func healthCheckFailure(t *testing.T, w *world) {
	f0 := w.base("0")
	r0 := w.start(t, f0, map[string]tier{"platform": {wait: true, timeout: "30s"}})
	r1 := w.repo.Publish(t, f0.with("platform/web.yaml", w.deployment("platform")))
	v := w.svc.AwaitVerdict(t, r1, rollout.VerdictFailed, 2*time.Minute)
	if len(v.Failures) != 1 || v.Failures[0].Layer != w.ns+"/platform" || v.Failures[0].Reason != "HealthCheckFailed" {
		t.Fatalf("want platform HealthCheckFailed:\n%s", dump(v))
	}
	w.expectWait(t, r1, 1)
	failed := w.failed("platform", "HealthCheckFailed", r1)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), failed)
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictFailed}}, applying(r0), applied(r0), applying(r1), failed)
	// Flux's message varies ("timeout waiting for: [Deployment/...
	// status: 'InProgress']", or when its client's rate limiter hits the
	// deadline first, "client rate limiter Wait returned an error"): the
	// mail gives it as Flux sent it.
	body := w.mailText(t, failed)
	if msg := v.Failures[0].Message; !strings.HasPrefix(msg, "health check failed after ") ||
		!strings.Contains(body, "Reason:  HealthCheckFailed") || !strings.Contains(body, "Message: "+msg) {
		t.Fatalf("the failed mail does not give Flux's reason and message %q:\n%s", msg, body)
	}
}

// superseding publishes a commit whose Deployment never becomes ready, and
// a fixing commit while its health check runs.
func (w *world) superseding(t *testing.T, shard string) (r0, r1, r2 Commit) {
	t.Helper()
	f0 := w.base("0")
	opts := map[string]tier{}
	for _, n := range tiers {
		opts[n] = tier{shard: shard, wait: n == "platform", timeout: "30s"}
	}
	r0 = w.start(t, f0, opts)
	r1 = w.repo.Publish(t, f0.with("platform/web.yaml", w.deployment("platform")))
	// The Deployment exists: platform applied r1 and checks its health.
	deadline := time.Now().Add(time.Minute)
	for w.object(t, "apps/v1", "Deployment", "platform", "web") == nil {
		if time.Now().After(deadline) {
			t.Fatal("platform did not apply the Deployment within 1m")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r2 = w.repo.Publish(t, w.base("2"))
	return r0, r1, r2
}

// waitFrom starts a pipeline's `wait` for c now; the channel gives its exit
// code and output once it stopped, on the first terminal verdict.
func (w *world) waitFrom(c Commit) <-chan string {
	done := make(chan string, 1)
	go func() {
		code, out, err := w.svc.Wait(c)
		done <- fmt.Sprintf("exit %d (%v)\n%s", code, err, out)
	}()
	return done
}

// expectEarlyWait checks what a `wait` started while the newer commit was
// arriving stopped on: the final verdict, not one it turned from.
func expectEarlyWait(t *testing.T, early <-chan string, c Commit, want rollout.Verdict) {
	t.Helper()
	got := <-early
	if !strings.HasPrefix(got, "exit 1 (<nil>)") || !strings.Contains(got, c.Revision+" on "+Cluster+": "+want.String()+" (") {
		t.Fatalf("a wait for %s started as the next commit arrived stopped on something else than %s:\n%s", c.Hash[:7], want, got)
	}
}

// 5a. By default kustomize-controller finishes the old commit's health
// check: it fails on its own, and the newer commit is applied.
func supersededWaitsForHealthCheck(t *testing.T, w *world) {
	r0, r1, r2 := w.superseding(t, "")
	early := w.waitFrom(r1)
	w.awaitApplied(t, r2, tiers...)
	v := w.svc.AwaitVerdict(t, r1, rollout.VerdictFailed, time.Minute)
	if len(v.Failures) != 1 || v.Failures[0].Reason != "HealthCheckFailed" || v.SupersededBy == nil || *v.SupersededBy != r2.Revision {
		t.Fatalf("want r1 failed with HealthCheckFailed, and superseded_by r2:\n%s", dump(v))
	}
	expectEarlyWait(t, early, r1, rollout.VerdictFailed)
	w.expectWait(t, r1, 1)
	w.expectWait(t, r2, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), w.failed("platform", "HealthCheckFailed", r1),
		applying(r2), applied(r2))
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictFailed}, {r2, rollout.VerdictApplied}},
		applying(r0), applied(r0), applying(r1), w.failed("platform", "HealthCheckFailed", r1), applying(r2), applied(r2))
}

// 5b. With CancelHealthCheckOnNewRevision, the old commit's health check is
// canceled (HealthCheckCanceled): superseded, not failed.
func supersededCancelsHealthCheck(t *testing.T, w *world) {
	r0, r1, r2 := w.superseding(t, ShardCancel)
	early := w.waitFrom(r1)
	w.awaitApplied(t, r2, tiers...)
	v := w.svc.AwaitVerdict(t, r1, rollout.VerdictSuperseded, time.Minute)
	if v.SupersededBy == nil || *v.SupersededBy != r2.Revision || len(v.Failures) != 0 {
		t.Fatalf("want r1 superseded by r2 without failures:\n%s", dump(v))
	}
	w.awaitLayer(t, r1, "platform", rollout.LayerCanceled, "HealthCheckCanceled")
	expectEarlyWait(t, early, r1, rollout.VerdictSuperseded)
	w.expectWait(t, r1, 1)
	w.expectWait(t, r1, 0, "--follow-superseded")
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applying(r2), applied(r2))
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictSuperseded}, {r2, rollout.VerdictApplied}},
		applying(r0), applied(r0), applying(r1), applying(r2), applied(r2))
}

// awaitLayer polls until a tier's state in c's verdict is state, with
// reason.
func (w *world) awaitLayer(t *testing.T, c Commit, tier string, state rollout.LayerState, reason string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := w.svc.Verdict(c.Hash)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range v.Layers.All() {
			if l.Name == w.ns+"/"+tier && l.State == state && l.Reason == reason {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not %s (%s) after 1m:\n%s", tier, state, reason, dump(v))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// 6. A commit that changes no manifests: Flux sends no Progressing event,
// only DependencyNotReady and the success (the heartbeat's reason), which
// are enough for applied.
func noChange(t *testing.T, w *world) {
	f0 := w.base("0")
	r0 := w.start(t, f0, nil)
	before := w.progressing(t)
	if before == 0 {
		t.Fatal("no Progressing event counted for the first commit, which created objects")
	}
	r1 := w.repo.Publish(t, f0)
	v := w.awaitApplied(t, r1, tiers...)
	if after := w.progressing(t); after != before {
		t.Fatalf("%d Progressing events during a commit that changes nothing", after-before)
	}
	for _, l := range v.Layers.All() {
		if l.Reason != "ReconciliationSucceeded" {
			t.Fatalf("layer %s: reason %s\n%s", l.Name, l.Reason, dump(v))
		}
	}
	w.expectWait(t, r1, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1))
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictApplied}}, applying(r0), applied(r0), applying(r1), applied(r1))
}

func (w *world) progressing(t *testing.T) int {
	t.Helper()
	n, err := w.svc.Received("Progressing")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// 7. A suspended tier is not waited for.
func suspendedTier(t *testing.T, w *world) {
	r0 := w.start(t, w.base("0"), nil)
	w.applyTier(t, 2, tier{suspend: true})
	r1 := w.repo.Publish(t, w.base("1"))
	v := w.awaitApplied(t, r1, "infra", "platform")
	for _, l := range v.Layers.All() {
		if l.Name == w.ns+"/apps" {
			t.Fatalf("the suspended tier is expected:\n%s", dump(v))
		}
	}
	if got := lastApplied(w.kustomization(t, "apps")); got != r0.Revision {
		t.Fatalf("suspended apps applied %s", got)
	}
	w.expectWait(t, r1, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1))
	// Events alone cannot know apps is suspended: it is in --layers, and
	// silent on r1, which therefore is not applied.
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictApplying}}, applying(r0), applied(r0), applying(r1))
}

// 8. The service is down while a commit rolls out, long enough for
// notification-controller to give up on every event of it: back up, it
// reaches the verdict from cluster state alone and sends the mails it owed,
// once.
func downDuringRollout(t *testing.T, w *world) {
	r0 := w.start(t, w.base("0"), nil)
	r1 := w.outage(t, 1)[0]
	w.awaitApplied(t, r1, tiers...)
	w.expectNoEvents(t)
	w.expectWait(t, r1, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1))
	// The events-only instance was down too: every event of r1 was lost to
	// it, and silence is not success.
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictUnknown}}, applying(r0), applied(r0))
}

// outage stops both instances, publishes n commits one after the other,
// each applied by every tier, waits until notification-controller gave up
// on all their events, and starts the instances again.
func (w *world) outage(t *testing.T, n int) []Commit {
	t.Helper()
	w.svc.Stop()
	w.evt.Stop()
	seen := len(w.deliveries(t))
	var out []Commit
	for i := range n {
		c := w.repo.Publish(t, w.base(fmt.Sprint(i+1)))
		w.awaitCluster(t, c, tiers...)
		out = append(out, c)
	}
	w.awaitUndelivered(t, seen)
	w.svc.Start()
	w.evt.Start()
	return out
}

// expectNoEvents checks that no event reached the instance that reads the
// cluster since it started: what it knows came from cluster state alone.
func (w *world) expectNoEvents(t *testing.T) {
	t.Helper()
	if n, err := w.svc.Received(""); err != nil || n != 0 {
		t.Fatalf("%d events reached the service after its restart (%v): not from cluster state alone", n, err)
	}
}

// awaitUndelivered waits until notification-controller has given up on
// every event it dispatched since the first seen deliveries, to both
// instances, the last of them being apps' success (the end of a rollout).
func (w *world) awaitUndelivered(t *testing.T, seen int) {
	t.Helper()
	w.awaitGivenUp(t, map[string]int{w.ns: seen}, bothInstances, func(ds []Delivery) bool {
		for _, d := range slices.Backward(ds) {
			if !d.Failed && !d.Discarded {
				return d.Name == "apps" && strings.HasPrefix(d.Message, "Reconciliation finished")
			}
		}
		return false
	})
}

// bothInstances are the registrations of a scenario's two instances.
var bothInstances = []string{Options{}.Registration(), Options{EventsOnly: true}.Registration()}

// awaitGivenUp waits until notification-controller has ended, for good,
// every delivery of an event about the namespaces (the instances registered
// as regs being stopped, each failed), and done says the deliveries logged
// since seen (how many of each namespace it had logged before) are those
// awaited; it dispatched one at least.
func (w *world) awaitGivenUp(t *testing.T, seen map[string]int, regs []string, done func(since []Delivery) bool) {
	t.Helper()
	// A delivery runs for at most its Provider's timeout (the `manifests`
	// command's), and its goroutine may start late on a loaded machine.
	delivering := w.providerTimeout(t, regs) + 10*time.Second
	// Five minutes: on a loaded machine the controllers take most of
	// one to reach the events awaited (a cold CI run once took longer).
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var (
			since      []Delivery
			dispatched int
			last       time.Time
		)
		failed := map[string]int{}
		for ns, n := range seen {
			ds, err := w.flux.Deliveries(ns)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if !d.Failed && !d.Discarded && d.At.After(last) {
					last = d.At
				}
			}
			since = append(since, ds[n:]...)
		}
		for _, d := range since {
			switch {
			case d.Failed:
				failed[d.Alert]++
			case !d.Discarded:
				dispatched++
			}
		}
		// Not "as many failed as were dispatched since seen": a failure
		// does not say which event it was, and one dispatched just before
		// seen fails after it (twice in CI, every scenario at once, this
		// waited in vain). Every delivery has ended once the last event
		// was dispatched longer ago than a delivery lasts.
		if dispatched > 0 && done(since) && time.Since(last) > delivering {
			for _, r := range regs {
				if failed[r] == 0 {
					t.Fatalf("notification-controller dispatched %d events but none failed for %s, which is stopped", dispatched, r)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification-controller still delivering after 5m: %d dispatched, the last at %s, failed %v", dispatched, last.Format(time.TimeOnly), failed)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// providerTimeout is the longest timeout of the Providers of the instances
// registered as regs, as the `manifests` command wrote them.
func (w *world) providerTimeout(t *testing.T, regs []string) time.Duration {
	t.Helper()
	ri, err := w.c.ResourceFor("notification.toolkit.fluxcd.io/v1beta3", "Provider", w.ns)
	if err != nil {
		t.Fatal(err)
	}
	var longest time.Duration
	for _, r := range regs {
		p, err := ri.Get(context.Background(), r, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := unstructured.NestedString(p.Object, "spec", "timeout")
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("Provider %s's timeout %q: %v", r, s, err)
		}
		longest = max(longest, d)
	}
	return longest
}

// 8b. The service is down while two commits roll out one after the other:
// the first was the source's revision only while the service was down. It
// catches both up from cluster state (the Kustomizations' status.history
// for the first) and sends the mails it owed for each.
func downDuringTwoCommits(t *testing.T, w *world) {
	r0 := w.start(t, w.base("0"), nil)
	rs := w.outage(t, 2)
	r1, r2 := rs[0], rs[1]
	w.awaitApplied(t, r2, tiers...)
	v := w.svc.AwaitVerdict(t, r1, rollout.VerdictApplied, time.Minute)
	w.expectNoEvents(t)
	if v.Layers.Len() != 3 {
		t.Fatalf("r1 applied on %d layers:\n%s", v.Layers.Len(), dump(v))
	}
	w.expectWait(t, r1, 0)
	w.expectWait(t, r2, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1), applying(r2), applied(r2))
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictUnknown}, {r2, rollout.VerdictUnknown}}, applying(r0), applied(r0))
}

// 8c. Events lost while a commit reached the first tier only (issue 50).
// The events-only instance, without --layers, misses every event while r1
// reaches infra, whose health check waits on a Deployment, and r2 is
// pushed: platform's and apps' DependencyNotReady for both, or for r2 alone
// when kustomize-controller, busy with the other scenarios, first looks
// after r2 was pushed (notification-controller drops the repeats of each
// for 5 minutes). It is down for them
// as it would be behind a stopped notification-controller, which every
// scenario here shares and so keeps running. Back up, it hears infra report
// r1, then r2 first: platform and apps, at r0 as far as it heard, must run
// r2 before it says applied (it said applied on infra alone, and turned back
// to applying when platform spoke, before expected layers followed every
// layer's last revision). One applied mail; its `wait` exits 0 only then.
func eventsLostBetweenCommits(t *testing.T, w *world) {
	w.inferLayers = true
	f0 := w.base("0")
	r0 := w.start(t, f0, map[string]tier{"infra": {wait: true, timeout: "5m"}})
	// It knows the tiers from r0 alone: the first commit it hears of, which
	// it may say applied before the later tiers first spoke.
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := w.evt.Verdict(r0.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil && v.Verdict == rollout.VerdictApplied && v.Layers.Len() == len(tiers) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events only: r0 not applied on every tier within 1m: %s", dump(v))
		}
		time.Sleep(250 * time.Millisecond)
	}
	w.evt.Stop()
	seen := len(w.deliveries(t))
	f1 := f0.with("infra/web.yaml", w.deployment("infra"))
	r1 := w.repo.Publish(t, f1)
	deadline = time.Now().Add(time.Minute)
	for w.object(t, "apps/v1", "Deployment", "infra", "web") == nil {
		if time.Now().After(deadline) {
			t.Fatal("infra did not apply the Deployment within 1m")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// infra ends r1's health check and applies r2 in one second, the first
	// either instance hears of them: revisions first seen in the same second
	// are ordered by hash (README, "Limits known today"), so r2's content is
	// one whose hash sorts after r1's, as its time does.
	var f2 files
	for i := 2; f2 == nil || w.repo.NextHash(t, f2) < r1.Hash; i++ {
		f2 = f1.with("infra/settings.yaml", w.configMap("infra", "settings", "", fmt.Sprint(i)))
	}
	r2 := w.repo.Publish(t, f2)
	w.awaitLost(t, seen, time.Now())
	w.evt.Start()
	// Every answer it gives for r2, and its pipeline's wait, checked
	// against what Flux says in the Kustomizations' status (written before
	// the events that say so).
	early := make(chan string, 1)
	go func() {
		code, out, err := w.evt.Wait(r2)
		apps, kerr := w.readKustomization("apps")
		if kerr != nil {
			err = errors.Join(err, kerr)
		}
		early <- fmt.Sprintf("exit %d (%v) with apps at %s\n%s", code, err, lastApplied(apps), out)
	}()
	watched := w.watchApplied(w.evt, r2)
	w.makeReady(t, "infra", "web")
	w.awaitApplied(t, r2, tiers...)
	if got := <-early; !strings.HasPrefix(got, "exit 0 (<nil>) with apps at "+r2.Revision+"\n") {
		t.Fatalf("events only: wait for r2 ended before apps applied it, or failed:\n%s", got)
	}
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	v := w.evt.AwaitVerdict(t, r2, rollout.VerdictApplied, time.Minute)
	if v.Layers.Len() != 3 || v.ExpectedFrom != rollout.ExpectedFromEvents {
		t.Fatalf("events only: r2 applied on %d layers, expected from %s:\n%s", v.Layers.Len(), v.ExpectedFrom, dump(v))
	}
	w.expectWait(t, r2, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applying(r2), applied(r2))
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictSuperseded}, {r2, rollout.VerdictApplied}},
		applying(r0), applied(r0), applying(r1), applying(r2), applied(r2))
}

// awaitLost waits until notification-controller has given up delivering to
// the events-only instance every event it dispatched since seen, among
// them apps' DependencyNotReady for the commit published at published:
// apps' first such event may be for it or for the one before (when the
// controller, busy with other scenarios, first looked after it was
// published), so the sign is one of apps' events dropped as a repeat well
// after it (apps is checked again every 5 s, and the event of each commit
// is dispatched once).
func (w *world) awaitLost(t *testing.T, seen int, published time.Time) {
	t.Helper()
	after := published.Add(2 * time.Second) // its controller's cache has the commit
	w.awaitGivenUp(t, map[string]int{w.ns: seen}, []string{Options{EventsOnly: true}.Registration()}, func(since []Delivery) bool {
		waits, repeated := 0, false
		for _, d := range since {
			switch {
			case d.Name != "apps" || d.Failed:
			case d.Discarded:
				repeated = repeated || d.At.After(after)
			case strings.HasPrefix(d.Message, "Dependencies do not meet ready condition"):
				waits++
			}
		}
		return waits > 0 && repeated
	})
}

// watchApplied polls svc's verdict for c until it is applied, checking
// each time it is that every tier has applied c as Flux's status says;
// the channel gives the first breach, or nil.
func (w *world) watchApplied(svc *Service, c Commit) <-chan error {
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			v, err := svc.Verdict(c.Hash)
			if err != nil {
				done <- err
				return
			}
			if v != nil && v.Verdict == rollout.VerdictApplied {
				for _, n := range tiers {
					k, err := w.readKustomization(n)
					if err != nil {
						done <- err
						return
					}
					if got := lastApplied(k); got != c.Revision {
						done <- fmt.Errorf("%s said %s applied while %s's lastAppliedRevision is %s:\n%s", svc.MailTo, c.Hash[:7], n, got, dump(v))
						return
					}
				}
				done <- nil
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- fmt.Errorf("%s did not say %s applied within 3m", svc.MailTo, c.Hash[:7])
	}()
	return done
}

// deliveries are notification-controller's deliveries for the scenario's
// namespace.
func (w *world) deliveries(t *testing.T) []Delivery {
	t.Helper()
	ds, err := w.flux.Deliveries(w.ns)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// 9. The service is killed mid-rollout, after it mailed "applying", and
// restarted: no duplicate and no missing mail. platform checks the health
// of a Deployment that only the test makes ready, after the restart: the
// rollout is still under way when the service dies, however slow the
// machine is at mailing.
func restartMidRollout(t *testing.T, w *world) {
	f0 := w.base("0")
	r0 := w.start(t, f0, map[string]tier{"platform": {wait: true, timeout: "5m"}})
	r1 := w.repo.Publish(t, f0.with("platform/web.yaml", w.deployment("platform")))
	w.awaitCluster(t, r1, "infra")
	// Killed once "applying" is delivered and recorded as sent: a kill
	// between the SMTP server's answer and that record would resend it
	// (with the same Message-ID), the known at-least-once window of SMTP.
	deadline := time.Now().Add(time.Minute)
	for {
		empty, err := w.svc.OutboxEmpty()
		if err != nil {
			t.Fatal(err)
		}
		if empty && slices.Contains(w.mails(w.svc), applying(r1)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no applying mail for r1 within 1m: %q", w.mails(w.svc))
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.svc.Kill()
	w.svc.Start()
	if got := lastApplied(w.kustomization(t, "apps")); got == r1.Revision {
		t.Fatal("apps applied r1 before the restart: the restart was not mid-rollout")
	}
	w.makeReady(t, "platform", "web")
	w.awaitApplied(t, r1, tiers...)
	w.expectWait(t, r1, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1))
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictApplied}}, applying(r0), applied(r0), applying(r1), applied(r1))
}

// replicasLeaderKilled: two replicas on PostgreSQL behind one address, as
// components/ha runs them; the leader is killed (SIGKILL) mid-rollout, its
// applying mail sent, the commit waiting on a health check; the other
// replica takes over and decides the commit applied, with every mail sent
// once.
func replicasLeaderKilled(t *testing.T, w *world) {
	f0 := w.base("0")
	r0 := w.repo.Publish(t, f0)
	reps := StartReplicas(t, w.c, w.bin, w.ns, w.smtp.Addr, w.pg.NewDatabase(t), 2)
	for i := range tiers {
		w.applyTier(t, i, map[string]tier{"platform": {wait: true, timeout: "5m"}}[tiers[i]])
	}
	for _, s := range reps.Members {
		s.AwaitVerdict(t, r0, rollout.VerdictApplied, 2*time.Minute)
	}
	r1 := w.repo.Publish(t, f0.with("platform/web.yaml", w.deployment("platform")))
	w.awaitCluster(t, r1, "infra")
	probe := reps.Members[0] // any replica reads the outbox the leader sends from
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		empty, err := probe.OutboxEmpty()
		if err != nil {
			t.Fatal(err)
		}
		if empty && slices.Contains(w.mails(probe), applying(r1)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no applying mail for r1 within 1m: %q", w.mails(probe))
		}
	}
	leader := reps.AwaitLeader(t, time.Minute)
	reps.Kill(leader)
	if got := lastApplied(w.kustomization(t, "apps")); got == r1.Revision {
		t.Fatal("apps applied r1 before the kill: the kill was not mid-rollout")
	}
	w.makeReady(t, "platform", "web")
	survivor := reps.Up()[0]
	survivor.AwaitVerdict(t, r1, rollout.VerdictApplied, 2*time.Minute)
	for _, n := range tiers {
		if got := lastApplied(w.kustomization(t, n)); got != r1.Revision {
			t.Fatalf("applied verdict for %s while %s's lastAppliedRevision is %s", r1.Hash[:7], n, got)
		}
	}
	if reps.AwaitLeader(t, time.Minute) != survivor {
		t.Fatal("the survivor does not lead")
	}
	w.awaitMails(t, survivor, applying(r0), applied(r0), applying(r1), applied(r1))
}

// makeReady writes the status a controller-manager would give a
// Deployment of one available replica once it exists (none runs here).
func (w *world) makeReady(t *testing.T, tier, name string) {
	t.Helper()
	ri, err := w.c.ResourceFor("apps/v1", "Deployment", w.ns+"-"+tier)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		d, err := ri.Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now().UTC().Format(time.RFC3339)
		d.Object["status"] = map[string]any{
			"observedGeneration": d.GetGeneration(),
			"replicas":           int64(1), "updatedReplicas": int64(1),
			"readyReplicas": int64(1), "availableReplicas": int64(1),
			"conditions": []any{
				map[string]any{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "lastTransitionTime": now, "lastUpdateTime": now},
				map[string]any{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "lastTransitionTime": now, "lastUpdateTime": now},
			},
		}
		if _, err = ri.UpdateStatus(context.Background(), d, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		return
	}
}

// 10. kustomize-controller with DisableCommitStatusEvent sends no success
// event at all: the applied verdict comes from the Kustomizations' status.
func noSuccessEvent(t *testing.T, w *world) {
	opts := map[string]tier{}
	for _, n := range tiers {
		opts[n] = tier{shard: ShardNoSuccessEvent}
	}
	r0 := w.start(t, w.base("0"), opts)
	r1 := w.repo.Publish(t, w.base("1"))
	w.awaitApplied(t, r1, tiers...)
	if n, err := w.svc.Received("ReconciliationSucceeded"); err != nil || n != 0 {
		t.Fatalf("%d success events (%v): the feature gate did not hold", n, err)
	}
	if n, err := w.svc.Received(""); err != nil || n == 0 {
		t.Fatalf("no event at all (%v): notification-controller did not deliver", err)
	}
	w.expectWait(t, r1, 0)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1))
	// Without the success events and the status, nothing says a tier
	// applied: for the events-only instance neither commit is applied, and
	// the first was left for the second before it was.
	w.expectEventsOnly(t, []verdict{{r0, rollout.VerdictSuperseded}, {r1, rollout.VerdictApplying}}, applying(r0), applying(r1))
}

// 11. A tier whose health check runs longer than --stuck-after (here 40 s
// against a 5 m timeout) holds the rollout: stuck, naming that tier as the
// root cause (not apps, which only waits on it), with one stuck mail.
func stuckBehindHealthCheck(t *testing.T, w *world) {
	w.stuckAfter = 40 * time.Second
	f0 := w.base("0")
	r0 := w.start(t, f0, map[string]tier{"platform": {wait: true, timeout: "5m"}})
	r1 := w.repo.Publish(t, f0.with("platform/web.yaml", w.deployment("platform")))
	v := w.svc.AwaitVerdict(t, r1, rollout.VerdictStuck, 2*time.Minute)
	if v.RootCause != w.ns+"/platform" || len(v.Failures) != 0 {
		t.Fatalf("want stuck on platform, without failures:\n%s", dump(v))
	}
	w.expectWait(t, r1, 1)
	stuck := fmt.Sprintf("stuck: %s waiting on %s/platform", r1.Hash[:7], w.ns)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), stuck)
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictStuck}}, applying(r0), applied(r0), applying(r1), stuck)
}

// 14. A HelmRelease in the apps tier (no wait), its chart from an
// OCIRepository through chartRef, released by helm-controller: a commit
// that changes it is applied only once helm-controller released it; one
// whose upgrade fails is failed, naming the release and saying that it
// was rolled back, retried and stalled, and never applied; a commit that
// does not change the release is not held by its failure.
func helmReleases(t *testing.T, w *world) {
	h := w.helmWorld(t)
	f0, release, name := h.files, h.release, h.name
	r0 := w.start(t, f0, nil)
	w.awaitHelmRelease(t, h.ns, "web", 1)

	// An upgrade that succeeds: applied only once the release is.
	r1 := w.repo.Publish(t, f0.with("apps/release.yaml", release("v1", false)))
	w.svc.AwaitVerdict(t, r1, rollout.VerdictApplied, 2*time.Minute)
	// helm-controller writes the release before it says so.
	if got := w.helmRevision(t, h.ns, "web"); got < 2 {
		t.Fatalf("applied verdict for %s while Helm's release is at version %d", r1.Hash[:7], got)
	}

	// An upgrade the kube-apiserver refuses: failed, naming the release,
	// rolled back.
	r2 := w.repo.Publish(t, f0.with("apps/release.yaml", release("v2", true)))
	v := w.svc.AwaitVerdict(t, r2, rollout.VerdictFailed, 2*time.Minute)
	if len(v.Failures) == 0 || v.Failures[0].Release.String() != name || v.Failures[0].Reason != "UpgradeFailed" ||
		!strings.Contains(v.Failures[0].Message, "Invalid_Name") || v.Failures[0].Layer != w.ns+"/apps" {
		t.Fatalf("failures of %s do not name the release's failed upgrade\n%s", r2.Hash[:7], dump(v))
	}
	// v1 installed, v2 r1's upgrade, v3 and v5 the failed upgrades, v4
	// and v6 their rollbacks (remediation retries: 1).
	const story = "rolled back to v2: the cluster runs the previous release; retried: failed again; " +
		"rolled back to v4: the cluster runs the previous release; stalled (Failed to upgrade after 2 attempt(s)): a new commit is needed"
	deadline := time.Now().Add(90 * time.Second)
	for v.Failures[0].Remediation != story {
		if time.Now().After(deadline) {
			t.Fatalf("what helm-controller did is not told for %s after 90s\n%s", r2.Hash[:7], dump(v))
		}
		time.Sleep(250 * time.Millisecond)
		v = w.svc.AwaitVerdict(t, r2, rollout.VerdictFailed, time.Minute)
	}

	// A commit that does not change the release, while it stays failed.
	r3 := w.repo.Publish(t, w.base("3").with("apps/release.yaml", release("v2", true)))
	w.awaitApplied(t, r3, tiers...)

	failed := "failed: " + w.ns + "/apps " + name + " UpgradeFailed (" + r2.Hash[:7] + ")"
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1), applying(r2), failed, applying(r3), applied(r3))
	w.expectEventsOnly(t, []verdict{{r0, rollout.VerdictApplied}, {r1, rollout.VerdictApplied}, {r2, rollout.VerdictFailed}, {r3, rollout.VerdictApplied}},
		applying(r0), applied(r0), applying(r1), applied(r1), applying(r2), failed, applying(r3), applied(r3))
}

// helmSetup is a scenario's HelmRelease web in <ns>-apps, applied by the
// apps tier, its chart in an OCIRepository there.
type helmSetup struct {
	ns      string
	name    string                                    // HelmRelease/<ns>/web, as failures name it
	files   files                                     // the first commit: the tiers and the release
	release func(message string, invalid bool) string // the release's manifest
}

// helmWorld publishes the chart and prepares the first commit; the
// Alerts send the HelmReleases of the apps namespace, which the service
// with cluster access reads too.
func (w *world) helmWorld(t *testing.T) helmSetup {
	appsNS := w.ns + "-apps"
	w.releaseNS = []string{appsNS}
	w.c.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+appsNS+"}\n")
	chart := NewChart(t, w.c, w.arts, appsNS, "web-chart")
	// invalid: an object the kube-apiserver refuses, so that the failed
	// upgrade is in Helm's storage and helm-controller remediates it (a
	// template that fails to render changes nothing to roll back).
	chart.Publish(t, "1.0.0", map[string]string{"configmap.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: {{ if .Values.invalid }}Invalid_Name{{ else }}{{ .Release.Name }}-settings{{ end }}}
data: {message: {{ .Values.message | quote }}}
`})
	release := func(message string, invalid bool) string {
		return fmt.Sprintf(`apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: web, namespace: %s}
spec:
  interval: 1h
  timeout: 30s
  chartRef: {kind: OCIRepository, name: web-chart}
  upgrade: {remediation: {retries: 1}}
  values: {message: %q, invalid: %v}
`, appsNS, message, invalid)
	}
	return helmSetup{ns: appsNS, name: "HelmRelease/" + appsNS + "/web", files: w.base("0").with("apps/release.yaml", release("v0", false)), release: release}
}

// 14b. The service is down while two commits change a HelmRelease: one
// whose upgrade helm-controller released, then one whose upgrade fails
// and stalls. Restarted, with no event at all, it tells both from the
// cluster's status: the HelmRelease's (which generation helm-controller
// attempted, and how it went) and the layer's history (which commit's
// apply made that generation).
func helmDown(t *testing.T, w *world) {
	h := w.helmWorld(t)
	r0 := w.start(t, h.files, nil)
	w.awaitHelmRelease(t, h.ns, "web", 1)
	w.svc.Stop()
	w.evt.Stop()
	seen := w.deliveryCounts(t, w.ns, h.ns)
	// Each commit changes every tier, so that every layer's history keeps
	// it (a revision current only while the service was down is known from
	// the layers' histories: README, "Limits known today").
	r1 := w.repo.Publish(t, w.base("1").with("apps/release.yaml", h.release("v1", false)))
	w.awaitCluster(t, r1, tiers...)
	w.awaitHelmRelease(t, h.ns, "web", 2)
	r2 := w.repo.Publish(t, w.base("2").with("apps/release.yaml", h.release("v2", true)))
	w.awaitCluster(t, r2, tiers...)
	w.awaitStalled(t, h.ns, "web")
	w.awaitGivenUp(t, seen, bothInstances, func([]Delivery) bool { return true })
	w.svc.Start()
	w.evt.Start()
	w.svc.AwaitVerdict(t, r1, rollout.VerdictApplied, time.Minute)
	v := w.svc.AwaitVerdict(t, r2, rollout.VerdictFailed, time.Minute)
	if len(v.Failures) == 0 || v.Failures[0].Release.String() != h.name || v.Failures[0].Class != rollout.FailureRelease {
		t.Fatalf("r2's failure from status does not name the release\n%s", dump(v))
	}
	w.expectNoEvents(t)
	failed := "failed: " + w.ns + "/apps " + h.name + " " + v.Failures[0].Reason + " (" + r2.Hash[:7] + ")"
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1), applying(r2), failed)
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictUnknown}, {r2, rollout.VerdictUnknown}}, applying(r0), applied(r0))
}

// 14c. The apps tier waits for what it applied (wait: true) and a commit's
// upgrade of its HelmRelease fails: kustomize-controller's health check
// of the HelmRelease fails too, and the verdict says first what Helm did
// (the release's own failure, its reason and error), not only the
// HelmRelease's status.
func helmWait(t *testing.T, w *world) {
	h := w.helmWorld(t)
	r0 := w.start(t, h.files, map[string]tier{"apps": {wait: true, timeout: "30s"}})
	w.awaitHelmRelease(t, h.ns, "web", 1)
	r1 := w.repo.Publish(t, h.files.with("apps/release.yaml", h.release("v1", true)))
	v := w.svc.AwaitVerdict(t, r1, rollout.VerdictFailed, 2*time.Minute)
	f := v.Failures[0]
	if f.Release.String() != h.name || f.Reason != "UpgradeFailed" || !strings.Contains(f.Message, "Invalid_Name") ||
		!strings.Contains(v.Summary, h.name+" UpgradeFailed") {
		t.Fatalf("the first failure of %s is not the release's own\n%s", r1.Hash[:7], dump(v))
	}
	// kustomize-controller's health check of the HelmRelease fails after.
	deadline := time.Now().Add(90 * time.Second)
	for !slices.ContainsFunc(v.Failures, func(f rollout.FailureView) bool {
		return f.Release == (rollout.Ref{}) && f.Reason == "HealthCheckFailed"
	}) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed health check of apps for %s after 90s\n%s", r1.Hash[:7], dump(v))
		}
		time.Sleep(250 * time.Millisecond)
		v = w.svc.AwaitVerdict(t, r1, rollout.VerdictFailed, time.Minute)
	}
	mails := []string{applying(r0), applied(r0), applying(r1),
		"failed: " + w.ns + "/apps " + h.name + " UpgradeFailed (" + r1.Hash[:7] + ")", w.failed("apps", "HealthCheckFailed", r1)}
	w.expectMails(t, mails...)
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictFailed}}, mails...)
}

// 14d. A HelmRelease whose chart is a directory of the repository itself
// (chart.spec from the GitRepository, reconcileStrategy Revision): a commit
// that changes only the chart changes nothing kustomize-controller applies,
// and the chart's version names the commit (1.0.0+<12 hex>). With cluster
// access, every commit the apps tier reaches holds the release: applied
// only once helm-controller released that commit's chart, failed naming
// the release when its upgrade fails. With events only, the release's
// events name the commit, so the verdicts end the same; but nothing says
// beforehand that the commit changes the release, and the apps tier's
// success may come first (README, "Limits known today").
func helmChartFromCommit(t *testing.T, w *world) {
	appsNS := w.ns + "-apps"
	w.releaseNS = []string{appsNS}
	w.c.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+appsNS+"}\n")
	chart := func(f files, message string, invalid bool) files {
		name := "{{ .Release.Name }}-settings"
		if invalid {
			name = "Invalid_Name" // refused by the kube-apiserver: the upgrade fails and is rolled back
		}
		return f.with("charts/web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 1.0.0\n").
			with("charts/web/templates/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "+name+"}\ndata: {message: "+strconv.Quote(message)+"}\n")
	}
	release := fmt.Sprintf(`apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: web, namespace: %s}
spec:
  interval: 1h
  timeout: 30s
  chart:
    spec:
      chart: ./charts/web
      reconcileStrategy: Revision
      sourceRef: {kind: GitRepository, name: fleet, namespace: %s}
  upgrade: {remediation: {retries: 1}}
`, appsNS, w.ns)
	name := "HelmRelease/" + appsNS + "/web"
	r0 := w.start(t, w.base("0"), nil)
	f1 := chart(w.base("0").with("apps/release.yaml", release), "v1", false)
	r1 := w.repo.Publish(t, f1)
	w.repo.BuildChart(t, appsNS, "web", "charts/web", r1)
	w.svc.AwaitVerdict(t, r1, rollout.VerdictApplied, 2*time.Minute)
	if got := w.helmRevision(t, appsNS, "web"); got < 1 {
		t.Fatalf("applied verdict for %s before Helm installed the release", r1.Hash[:7])
	}

	// Only the chart changes: held by the release all the same.
	r2 := w.repo.Publish(t, chart(f1, "v2", false))
	w.repo.BuildChart(t, appsNS, "web", "charts/web", r2)
	v := w.svc.AwaitVerdict(t, r2, rollout.VerdictApplied, 2*time.Minute)
	if got := w.helmRevision(t, appsNS, "web"); got < 2 {
		t.Fatalf("applied verdict for %s while Helm's release is at version %d", r2.Hash[:7], got)
	}
	held := false
	for _, l := range v.Layers.All() {
		held = held || l.Name == w.ns+"/apps" && len(l.Releases) == 1 && l.Releases[0].Name == "web" && l.Releases[0].State == rollout.LayerApplied
	}
	if !held {
		t.Fatalf("%s's apps tier does not hold the released release\n%s", r2.Hash[:7], dump(v))
	}

	// A chart the kube-apiserver refuses: failed, naming the release.
	r3 := w.repo.Publish(t, chart(f1, "v3", true))
	w.repo.BuildChart(t, appsNS, "web", "charts/web", r3)
	v = w.svc.AwaitVerdict(t, r3, rollout.VerdictFailed, 2*time.Minute)
	if len(v.Failures) == 0 || v.Failures[0].Release.String() != name || v.Failures[0].Reason != "UpgradeFailed" ||
		!strings.Contains(v.Failures[0].Message, "Invalid_Name") || !strings.Contains(v.Failures[0].Message, "1.0.0+"+r3.Hash[:12]) {
		t.Fatalf("failures of %s do not name the release's failed upgrade of its chart\n%s", r3.Hash[:7], dump(v))
	}
	w.expectWait(t, r3, 1)
	failed := "failed: " + w.ns + "/apps " + name + " UpgradeFailed (" + r3.Hash[:7] + ")"
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1), applying(r2), applied(r2), applying(r3), failed)

	// Events only: helm-controller may release a commit's chart before
	// any layer reported the commit (the chart is built from the source's
	// artifact, as the layers' apply is), and this GitRepository sends no
	// events: such a report names a commit no rollout has yet and goes to
	// the hold before it (README, "Limits known today"). The commits
	// before stay applied whatever comes; the failing one is failed when
	// a report of its failure names it once its layers reported it (the
	// upgrade is retried once), else it is applied without its release.
	for _, c := range []Commit{r1, r2} {
		w.evt.AwaitVerdict(t, c, rollout.VerdictApplied, time.Minute)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := w.evt.Verdict(r3.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil && v.Verdict == rollout.VerdictFailed {
			if len(v.Failures) == 0 || v.Failures[0].Release.String() != name {
				t.Fatalf("events only: the failure of %s does not name the release\n%s", r3.Hash[:7], dump(v))
			}
			break
		}
		if v != nil && v.Verdict == rollout.VerdictApplied && time.Now().After(deadline) {
			t.Logf("events only: %s applied, its release's failure reported before its layers (the limit)", r3.Hash[:7])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events only: %s\n%s", r3.Hash[:7], dump(v))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("%s: %q", w.evt.MailTo, w.mails(w.evt))
}

// 14e. helm-controller's events never reach the service (here the Alert
// does not send them; notification-controller down for the whole rollout
// is the same to the service), while it runs: with cluster access the
// HelmRelease's status alone gives the same verdicts as in 14, as they
// happen. With events only, nothing says a release the tier changed was
// released: its commit is never applied.
func helmSilent(t *testing.T, w *world) {
	h := w.helmWorld(t)
	w.silent = true
	r0 := w.start(t, h.files, nil)
	w.awaitHelmRelease(t, h.ns, "web", 1)
	r1 := w.repo.Publish(t, h.files.with("apps/release.yaml", h.release("v1", false)))
	w.svc.AwaitVerdict(t, r1, rollout.VerdictApplied, 2*time.Minute)
	if got := w.helmRevision(t, h.ns, "web"); got < 2 {
		t.Fatalf("applied verdict for %s while Helm's release is at version %d", r1.Hash[:7], got)
	}
	r2 := w.repo.Publish(t, h.files.with("apps/release.yaml", h.release("v2", true)))
	v := w.svc.AwaitVerdict(t, r2, rollout.VerdictFailed, 2*time.Minute)
	if len(v.Failures) == 0 || v.Failures[0].Release.String() != h.name || v.Failures[0].Reason != "UpgradeFailed" ||
		!strings.Contains(v.Failures[0].Message, "Invalid_Name") {
		t.Fatalf("the failure of %s from status does not name the release's failed upgrade\n%s", r2.Hash[:7], dump(v))
	}
	if n, err := w.svc.ReceivedFrom("HelmRelease"); err != nil || n != 0 {
		t.Fatalf("%d HelmRelease events reached the service (%v): the Alert sent them", n, err)
	}
	failed := "failed: " + w.ns + "/apps " + h.name + " UpgradeFailed (" + r2.Hash[:7] + ")"
	w.expectMails(t, applying(r0), applied(r0), applying(r1), applied(r1), applying(r2), failed)
	// Events only: each commit's tier changed the release, which never
	// said it was released; the next commit supersedes it.
	w.expectEventsOnly(t, []verdict{{r0, rollout.VerdictSuperseded}, {r1, rollout.VerdictSuperseded}, {r2, rollout.VerdictApplying}},
		applying(r0), applying(r1), applying(r2))
}

// awaitStalled polls until helm-controller gave up on a HelmRelease
// (Stalled: its retries exhausted), after which it sends no more events.
func (w *world) awaitStalled(t *testing.T, namespace, name string) {
	t.Helper()
	ri, err := w.c.ResourceFor("helm.toolkit.fluxcd.io/v2", "HelmRelease", namespace)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		hr, err := ri.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(hr.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Stalled" && m["status"] == "True" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("HelmRelease %s/%s not stalled within 2m", namespace, name)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// deliveryCounts is how many deliveries notification-controller has
// logged about each namespace.
func (w *world) deliveryCounts(t *testing.T, namespaces ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, ns := range namespaces {
		ds, err := w.flux.Deliveries(ns)
		if err != nil {
			t.Fatal(err)
		}
		out[ns] = len(ds)
	}
	return out
}

// helmRevision is the version of a Helm release that is deployed, from
// Helm's own storage (the release Secrets helm-controller writes); 0 when
// none is.
func (w *world) helmRevision(t *testing.T, namespace, name string) int {
	t.Helper()
	ri, err := w.c.ResourceFor("v1", "Secret", namespace)
	if err != nil {
		t.Fatal(err)
	}
	list, err := ri.List(context.Background(), metav1.ListOptions{LabelSelector: "owner=helm,name=" + name + ",status=deployed"})
	if err != nil {
		t.Fatal(err)
	}
	v := 0
	for _, s := range list.Items {
		var n int
		if _, err := fmt.Sscan(s.GetLabels()["version"], &n); err == nil {
			v = max(v, n)
		}
	}
	return v
}

// awaitHelmRelease polls until Helm's release is deployed at version or
// later.
func (w *world) awaitHelmRelease(t *testing.T, namespace, name string, version int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for w.helmRevision(t, namespace, name) < version {
		if time.Now().After(deadline) {
			t.Fatalf("Helm release %s/%s not deployed at version %d within 2m", namespace, name, version)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// 14f. What helm-controller did after a failed upgrade, told right: the
// HelmRelease's upgrade remediation rolls back and retries once
// (retries: 1); the commit's upgrade is refused by the kube-apiserver
// after Helm stored it, so helm-controller rolls back to v1, retries,
// fails again, rolls back to v3 and stalls. The verdict is failed from
// the first failure; /verdict tells the remediation in order at every
// poll (each answer one of the story's stages, never "has not acted"),
// ending with the stall where the status is read; the one failure mail
// tells what was known when it was due; the stall, later, reaches the
// forge's description without a second mail; wait exits 1 saying it all.
func helmRollbackStalls(t *testing.T, w *world) {
	w.showInGitHub(t)
	h := w.helmWorld(t)
	r0 := w.start(t, h.files, nil)
	w.awaitHelmRelease(t, h.ns, "web", 1)
	r1 := w.repo.Publish(t, h.files.with("apps/release.yaml", h.release("v1", true)))
	const (
		rb1   = "rolled back to v1: the cluster runs the previous release"
		rb3   = "rolled back to v3: the cluster runs the previous release"
		again = "retried: failed again"
		stall = "stalled (Failed to upgrade after 2 attempt(s)): a new commit is needed"
	)
	stages := []string{"", rb1, rb1 + "; " + again, rb1 + "; " + again + "; " + rb3, rb1 + "; " + again + "; " + rb3 + "; " + stall}
	w.awaitStory(t, r1, h.name, "UpgradeFailed", stages, stages[3])
	w.expectWaitSays(t, r1, 1, "then: "+stages[4])
	w.expectStalledInGitHub(t, r1)
	failed := "failed: " + w.ns + "/apps " + h.name + " UpgradeFailed (" + r1.Hash[:7] + ")"
	w.expectRemediationMailed(t, failed, stages)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), failed)
	w.expectEventsOnly(t, []verdict{{r0, rollout.VerdictApplied}, {r1, rollout.VerdictFailed}}, applying(r0), applied(r0), applying(r1), failed)
}

// 14g. The same for a new HelmRelease whose install fails, with install
// remediation (retries: 1, remediateLastFailure: true, which install
// remediation does not default to): helm-controller uninstalls the failed
// release (v1), retries, fails, uninstalls v1 again and stalls. The second
// uninstall's event, word for word the first, is dropped by
// notification-controller as a duplicate: events alone tell one; the
// status counts both.
func helmUninstallStalls(t *testing.T, w *world) {
	h := w.helmWorld(t)
	r0 := w.start(t, w.base("0"), nil)
	release := strings.Replace(h.release("v1", true), "upgrade: {remediation: {retries: 1}}", "install: {remediation: {retries: 1, remediateLastFailure: true}}", 1)
	r1 := w.repo.Publish(t, w.base("0").with("apps/release.yaml", release))
	const (
		un    = "uninstalled the failed release v1: it is gone from the cluster"
		again = "retried: failed again"
		stall = "stalled (Failed to install after 2 attempt(s)): a new commit is needed"
	)
	stages := []string{"", un, un + "; " + again, un + "; " + again + "; uninstalled again", un + "; " + again + "; uninstalled again; " + stall}
	w.awaitStory(t, r1, h.name, "InstallFailed", stages, un)
	w.expectWaitSays(t, r1, 1, "then: "+stages[4])
	failed := "failed: " + w.ns + "/apps " + h.name + " InstallFailed (" + r1.Hash[:7] + ")"
	w.expectRemediationMailed(t, failed, stages)
	w.expectMails(t, applying(r0), applied(r0), applying(r1), failed)
	w.expectEventsOnly(t, []verdict{{r0, rollout.VerdictApplied}, {r1, rollout.VerdictFailed}}, applying(r0), applied(r0), applying(r1), failed)
}

// awaitStory polls both instances' /verdict of c until helm-controller
// stalled and each tells the whole story: the one that reads the cluster
// the last of stages, the events-only one eventsOnly. Every answer on the
// way must be failed from the release's failure on (reason), naming it,
// and tell one of the stages: what helm-controller did so far, in order.
func (w *world) awaitStory(t *testing.T, c Commit, release, reason string, stages []string, eventsOnly string) {
	t.Helper()
	check := func(who string, v *rollout.View) string {
		if v == nil || v.Verdict != rollout.VerdictFailed {
			return "\x00" // not failed yet
		}
		var f *rollout.FailureView
		for i := range v.Failures {
			if v.Failures[i].Release != (rollout.Ref{}) && f == nil {
				f = &v.Failures[i]
			}
		}
		if f == nil || f.Release.String() != release || f.Reason != reason || v.Verdict != rollout.VerdictFailed {
			t.Fatalf("%s: the failure of %s does not name %s's %s\n%s", who, c.Hash[:7], release, reason, dump(v))
		}
		if !slices.Contains(stages, f.Remediation) || strings.Contains(f.Remediation, "has not acted") {
			t.Fatalf("%s: %s tells %q, which is none of helm-controller's stages %q\n%s", who, c.Hash[:7], f.Remediation, stages, dump(v))
		}
		if f.Stalled != (f.Remediation == stages[len(stages)-1]) || f.Stalled != strings.Contains(v.Summary, "stalled, a new commit is needed") {
			t.Fatalf("%s: stalled %v with %q, summary %q", who, f.Stalled, f.Remediation, v.Summary)
		}
		return f.Remediation
	}
	deadline := time.Now().Add(3 * time.Minute)
	var svc, evt string
	for svc != stages[len(stages)-1] || evt != eventsOnly {
		if time.Now().After(deadline) {
			t.Fatalf("after 3m, %s tells %q with cluster access, %q from events; want %q and %q", c.Hash[:7], svc, evt, stages[len(stages)-1], eventsOnly)
		}
		for _, x := range []struct {
			s    *Service
			into *string
		}{{w.svc, &svc}, {w.evt, &evt}} {
			v, err := x.s.Verdict(c.Hash)
			if err != nil {
				t.Fatal(err)
			}
			*x.into = check(x.s.MailTo, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := w.helmRevision(t, w.ns+"-apps", "web"); reason == "UpgradeFailed" && got < 5 {
		t.Fatalf("stalled with Helm's release deployed at version %d, want the second rollback's (5)", got)
	}
}

// expectWaitSays runs the pipeline's `wait` and checks its exit code and
// that its output says want.
func (w *world) expectWaitSays(t *testing.T, c Commit, code int, want string) {
	t.Helper()
	got, out, err := w.svc.Wait(c)
	if err != nil {
		t.Fatal(err)
	}
	if got != code || !strings.Contains(out, want) {
		t.Fatalf("wait %s: exit %d, want %d, saying %q\n%s", c.Hash[:7], got, code, want, out)
	}
}

// expectRemediationMailed: the failure mail tells what helm-controller had
// done when the failure was known: one of the stages, or none yet.
func (w *world) expectRemediationMailed(t *testing.T, label string, stages []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !slices.Contains(w.mails(w.svc), label) {
		if time.Now().After(deadline) {
			t.Fatalf("no mail %q within 1m: %q", label, w.mails(w.svc))
		}
		time.Sleep(100 * time.Millisecond)
	}
	text := w.mailText(t, label)
	_, told, _ := strings.Cut(text, "Remediation: ")
	told, _, _ = strings.Cut(told, "\n")
	told = strings.TrimSuffix(told, "\r") // the text part's lines end in CRLF
	if !slices.Contains(append(stages[1:], "none reported yet (the rollout page shows what helm-controller did next)"), told) {
		t.Fatalf("the failure mail tells %q, none of helm-controller's stages\n%s", told, text)
	}
	t.Logf("the failure mail tells: %s", told)
}

// expectStalledInGitHub: the forge's last status of c, failure, says that
// helm-controller stalled, a stall told after the failure.
func (w *world) expectStalledInGitHub(t *testing.T, c Commit) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var last forgetest.Status
		for _, d := range w.github.Deployments("acme/cluster") {
			if d.SHA == c.Hash && len(d.Statuses) > 0 {
				last = d.Statuses[len(d.Statuses)-1]
			}
		}
		if last.State == "failure" && strings.Contains(last.Description, "stalled, a new commit is needed") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GitHub's last status of %s: %+v, want a failure saying it stalled", c.Hash[:7], last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// 16. Flux's gitless setup: the tiers read an OCIRepository whose
// artifacts CI pushed from commits (origin revision main@sha1:<commit>):
// a clean commit, the same commit pushed again (a CI re-run: a new digest,
// which Flux applies with nothing to change), and a commit whose prune
// fails. Each is asked for by its git commit: one verdict per commit on
// the cluster (the newest artifact's for the rebuilt one), never 409; the
// mails name the commit, the artifact beside it. A rebuild is a new
// deploy of the commit, mailed as one (README, "Limits known today").
func ociArtifacts(t *testing.T, w *world) {
	w.repo = NewOCIRepo(t, w.c, w.arts, w.ns, "fleet-oci")
	w.protectConfigMaps(t)
	protected := w.configMap("apps", "protected", "  labels: {protect: \"true\"}\n", "0")
	r0 := w.start(t, w.base("0").with("apps/protected.yaml", protected), nil)
	w.awaitPolicy(t)
	r1 := w.repo.Publish(t, w.base("1").with("apps/protected.yaml", protected))
	v := w.awaitApplied(t, r1, tiers...)
	if v.Origin != "main@sha1:"+r1.Hash || v.Revision != r1.Revision {
		t.Fatalf("%s is not the rollout of artifact %s\n%s", r1.Hash[:7], r1.Revision, dump(v))
	}
	// Flux stamps events to the second, and two revisions a layer reported
	// in the same second are ordered by their hashes, not by arrival: the CI
	// re-run comes in a later second than the run it repeats, or no reader
	// of the events could tell which artifact is the newer.
	if d := time.Until(v.LastSeen.Truncate(time.Second).Add(time.Second)); d > 0 {
		time.Sleep(d)
	}
	rebuilt := w.repo.Rebuild(t, r1)
	w.awaitCluster(t, rebuilt, tiers...)
	for _, s := range []*Service{w.svc, w.evt} {
		deadline := time.Now().Add(time.Minute)
		for {
			v, err := s.Verdict(r1.Hash) // by the git commit: no 409 on one cluster
			if err != nil {
				t.Fatalf("%s: %s after its rebuild: %v", s.MailTo, r1.Hash[:7], err)
			}
			if v != nil && v.Revision == rebuilt.Revision && v.Verdict == rollout.VerdictApplied && v.Origin == "main@sha1:"+r1.Hash {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s is not the rebuilt artifact's applied rollout within 1m\n%s", s.MailTo, r1.Hash[:7], dump(v))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	w.expectWait(t, r1, 0)
	r2 := w.repo.Publish(t, w.base("2"))
	v = w.svc.AwaitVerdict(t, r2, rollout.VerdictFailed, 2*time.Minute)
	if len(v.Failures) != 1 || v.Failures[0].Reason != "PruneFailed" || v.Origin != "main@sha1:"+r2.Hash {
		t.Fatalf("%s: want its prune failure\n%s", r2.Hash[:7], dump(v))
	}
	w.expectWait(t, r2, 1)
	prune := fmt.Sprintf("prune failed: ConfigMap %s-apps/protected (%s)", w.ns, r2.Hash[:7])
	mails := []string{applying(r0), applied(r0), applying(r1), applied(r1), applying(r1), applied(r1), applying(r2), prune}
	w.expectMails(t, mails...)
	if body := w.mailText(t, prune); !strings.Contains(body, "main@sha1:"+r2.Hash+" (artifact "+r2.Revision+")") {
		t.Fatalf("the prune-failed mail does not name the commit and its artifact:\n%s", body)
	}
	w.expectEventsOnly(t, []verdict{{r1, rollout.VerdictApplied}, {r2, rollout.VerdictFailed}}, mails...)
}
