package rollout_test

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestRules runs the model's rules as scripts (testdata/rules/*.txt), in
// the manner of etcd raft's data-driven tests: each case is one line, the
// observations a model is given and, after "=>", what it must then say of
// a rollout: its verdict, and what more the case is about (the layers
// behind, the root cause, the mails due). The model runs alone (Apply,
// one batch an observation, each checked against the reference
// evaluation), as the engine runs it; the engine's tests keep what is the
// engine's: storing, restarting, publishing, time.
//
// A line:
//
//	[options |] observation, observation, ... => LABEL VERDICT; key args; ...
//
// An observation is "LAYER LABEL EVENT@SECOND [to=R] [obj=Kind/ns/name]"
// on layer flux-system/LAYER and revision main@sha1:<sha1 of LABEL>, or
// "git:NAME LABEL artifact@SECOND [subject=words_with_underscores]" of a
// GitRepository. EVENT is ok, prog, wait, cancel, fail(FluxReason),
// member(DEP+DEP) or suspended: the cluster reader's marks, with the
// layers the layer depends on. Failures are classed as ingest classes
// Flux's reasons. Options: now=SECONDS (600), layers=L+L (configured),
// fresh (no revision R0 applied by infra, platform and apps before),
// x3 (every observation delivered three times), batch (the line's
// observations in one batch, each a submission of its own).
//
// "oci:NAME" is OCIRepository apps/NAME (a chart's source).
// "hr:NAME - EVENT@SECOND" is an event of HelmRelease apps/NAME (ok is
// UpgradeSucceeded, rollback RollbackSucceeded); a layer's holds=N+N names
// the releases its report says it changed. A release's report naming
// LABEL in place of "-" names that commit as a chart built from it does
// (Commit: 12 hex digits); commit=HEX names any; layer=L is the layer the
// cluster says applies the release. "hrs:NAME - EVENT@SECOND
// applied=SECOND" is the release's state read from the cluster's status
// (ok, prog, pending: helm-controller has not acted on the spec,
// fail(Reason)), applied the time of the apply it follows.
// What helm-controller did after a failure: "hr:NAME - rollback@S v=N"
// and "uninstall@S v=N" are its remediation's events (v=1 unless told);
// a status's fail takes attempts=N (its failure counter), step=rollback:V
// or step=uninstall:V with remedied=N (its Remediated condition, after
// attempt N) and stalled=S (Stalled, retries exhausted).
//
// Keys after the verdict (or "none": no rollout, no mail): behind L,L; root L; by LABEL; late; from
// events|config|cluster; completed SECOND|none; layers N; state L=STATE,...; pending L=LABEL;
// failures L[>release]:Reason[:remedied][:after],...; releases L>release=STATE,...; subject words; source kind/ns/name;
// story TEXT (what helm-controller did after the first release failure,
// "; " written " / "); summary TEXT (likewise); said TEXT (the first
// release's last message); published V, V again, ... (the verdicts
// given to the forge outbox, "again" when restated);
// terminal; mails a, b, ... where a mail is "kind [layer] [object]
// [reason] to" as the outbox keys it, the layer's namespace and the
// recipients' @example.com left out. Layers are named without
// "flux-system/". Mails go to ops (--mail-to) and to what an
// observation's to= routes.
func TestRules(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "rules", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	cases := 0
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		name, n := "", 0
		for sc.Scan() {
			n++
			line := strings.TrimSpace(sc.Text())
			switch {
			case line == "":
				continue
			case strings.HasPrefix(line, "#"):
				name = strings.TrimSpace(strings.TrimPrefix(line, "#"))
				continue
			}
			cases++
			t.Run(fmt.Sprintf("%s:%d %s", filepath.Base(file), n, name), func(t *testing.T) {
				runRule(t, line)
			})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if cases < 30 {
		t.Fatalf("%d cases: the scripts lost some", cases)
	}
}

var scriptT0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func scriptHash(label string) string {
	s := sha1.Sum([]byte(label))
	return hex.EncodeToString(s[:])
}

const ns = "flux-system/"

func runRule(t *testing.T, line string) {
	input, want, ok := strings.Cut(line, "=>")
	if !ok {
		t.Fatalf("no => in %q", line)
	}
	opts := ""
	if o, rest, found := strings.Cut(input, "|"); found {
		opts, input = o, rest
	}
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"ops@example.com"}, Verify: true, Publish: true}
	now, repeat, fresh, batch := 600, 1, false, false
	for _, o := range strings.Fields(opts) {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "now":
			now = atoi(t, v)
		case "layers":
			for _, l := range strings.Split(v, "+") {
				cfg.Layers = append(cfg.Layers, layerOf(l))
			}
		case "fresh":
			fresh = true
		case "x3":
			repeat = 3
		case "batch":
			batch = true
		default:
			t.Fatalf("unknown option %q", o)
		}
	}
	// Each observation a batch of its own, or (batch) the line's all in
	// one, as the engine gathers submissions that arrive together.
	var batches [][]rollout.Observation
	if !fresh {
		for i, l := range []string{"infra", "platform", "apps"} {
			batches = append(batches, []rollout.Observation{parseObservation(t, fmt.Sprintf("%s R0 ok@%d", l, -600+10*i))})
		}
	}
	var together []rollout.Observation
	for _, s := range strings.Split(input, ",") {
		o := parseObservation(t, strings.TrimSpace(s))
		for range repeat {
			if batch {
				together = append(together, o)
			} else {
				batches = append(batches, []rollout.Observation{o})
			}
		}
	}
	if batch {
		batches = append(batches, together)
	}

	m, err := rollout.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := scriptT0.Add(time.Duration(now) * time.Second)
	views := map[string]*rollout.View{}
	mailed := map[string]bool{}
	var mails []rollout.Mail
	published := map[string][]string{}
	for _, b := range batches {
		groups := make([][]rollout.Observation, len(b))
		for i := range b {
			if err := m.Normalise(&b[i]); err != nil {
				t.Fatalf("%+v: %v", b[i], err)
			}
			groups[i] = b[i : i+1]
		}
		c := &rollout.Change{}
		m.Apply(c, groups, nil, at)
		m.Verify()
		for _, v := range c.Views {
			views[v.Hash] = v
		}
		for _, p := range c.Published {
			s := p.Verdict.String()
			if p.Restate {
				s += " again"
			}
			published[p.Key.Hash] = append(published[p.Key.Hash], s)
		}
		// The outbox takes a mail once per key.
		for _, ml := range c.Mails {
			if !mailed[ml.Key] {
				mailed[ml.Key] = true
				mails = append(mails, ml)
			}
		}
	}

	asserts := strings.Split(want, ";")
	head := strings.Fields(asserts[0])
	if len(head) != 2 {
		t.Fatalf("want LABEL VERDICT first, got %q", asserts[0])
	}
	v := views[scriptHash(head[0])]
	if head[1] == "none" {
		if v != nil {
			t.Fatalf("%s is a rollout: %s, %s", head[0], v.Verdict, v.Summary)
		}
		for _, m := range mails {
			if m.View != nil && m.View.Hash == scriptHash(head[0]) {
				t.Errorf("mail %s about %s", m.Kind, head[0])
			}
		}
		return
	}
	if v == nil {
		t.Fatalf("no rollout of %s", head[0])
	}
	if v.Verdict.String() != head[1] {
		t.Fatalf("verdict %s (%s), want %s", v.Verdict, v.Summary, head[1])
	}
	if v.Terminal != v.Verdict.Terminal() {
		t.Fatalf("terminal %v for %s", v.Terminal, v.Verdict)
	}
	for _, a := range asserts[1:] {
		key, arg, _ := strings.Cut(strings.TrimSpace(a), " ")
		arg = strings.TrimSpace(arg)
		got := ""
		if key == "published" {
			got = strings.Join(published[v.Hash], ", ")
		} else {
			got = saying(t, key, arg, v, mails)
		}
		if got != arg {
			t.Errorf("%s: got %q, want %q\nview: %+v", key, got, arg, v)
		}
	}
}

// saying is what v (and the mails due for it) say of key, written as the
// script writes it; the arg is the script's, for the keys that name what
// to look at.
func saying(t *testing.T, key, arg string, v *rollout.View, mails []rollout.Mail) string {
	switch key {
	case "behind":
		return short(strings.Join(v.Behind, ","))
	case "root":
		return short(v.RootCause)
	case "by":
		if v.SupersededBy == nil {
			return ""
		}
		return labelOf(*v.SupersededBy)
	case "late", "terminal":
		if key == "late" && v.Late || key == "terminal" && v.Terminal {
			return ""
		}
		return "not " + key
	case "from":
		return v.ExpectedFrom
	case "completed":
		if v.CompletedAt == nil {
			return "none"
		}
		return strconv.Itoa(int(v.CompletedAt.Sub(scriptT0) / time.Second))
	case "layers":
		return strconv.Itoa(v.Layers.Len())
	case "state", "pending":
		var out []string
		for _, kv := range strings.Split(arg, ",") {
			name, _, _ := strings.Cut(kv, "=")
			got := "absent"
			for _, l := range v.Layers.All() {
				if l.Name == ns+name {
					got = string(l.State)
					if key == "pending" {
						got = labelOf(l.Revision)
					}
				}
			}
			out = append(out, name+"="+got)
		}
		return strings.Join(out, ",")
	case "failures":
		var out []string
		for _, f := range v.Failures {
			s := short(f.Layer) + ":" + f.Reason
			if f.Release != (rollout.Ref{}) {
				s = short(f.Layer) + ">" + f.Release.Name + ":" + f.Reason
			}
			if f.Remediation != "" {
				s += ":remedied"
			}
			for _, o := range f.Objects {
				s += ":" + o.Kind + "/" + o.Namespace + "/" + o.Name
			}
			if f.AfterApplied {
				s += ":after"
			}
			out = append(out, s)
		}
		return strings.Join(out, ",")
	case "releases":
		var out []string
		for _, l := range v.Layers.All() {
			for _, rv := range l.Releases {
				out = append(out, short(l.Name)+">"+rv.Name+"="+string(rv.State))
			}
		}
		return strings.Join(out, ",")
	case "story", "summary":
		// What helm-controller did after the first release's failure, or
		// the summary, with "; " written " / ".
		s := v.Summary
		if key == "story" {
			s = ""
			for _, f := range v.Failures {
				if f.Release != (rollout.Ref{}) {
					s = f.Remediation
					break
				}
			}
		}
		return strings.ReplaceAll(s, "; ", " / ")
	case "said":
		// What the first release of a layer said last.
		for _, l := range v.Layers.All() {
			for _, rv := range l.Releases {
				return rv.Message
			}
		}
		return ""
	case "subject":
		return strings.ReplaceAll(v.Subject, " ", "_")
	case "source":
		return v.Source.String()
	case "mails":
		var out []string
		for _, m := range mails {
			if m.View == nil || m.View.Hash != v.Hash {
				continue
			}
			s := string(m.Kind)
			if m.Layer != "" {
				s += " " + short(m.Layer)
			}
			if m.Release != (rollout.Ref{}) {
				s += ">" + m.Release.Name
			}
			if o := m.Object; o != nil {
				s += " " + o.Kind + "/" + o.Namespace + "/" + o.Name
			}
			if m.Reason != "" {
				s += " " + m.Reason
			}
			out = append(out, s+" "+strings.TrimSuffix(m.To, "@example.com"))
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	t.Fatalf("unknown key %q", key)
	return ""
}

func parseObservation(t *testing.T, s string) rollout.Observation {
	f := strings.Fields(s)
	if len(f) < 3 {
		t.Fatalf("observation %q: want EMITTER LABEL EVENT@SECOND", s)
	}
	event, sec, ok := strings.Cut(f[2], "@")
	if !ok {
		t.Fatalf("observation %q: no @second", s)
	}
	o := rollout.Observation{Revision: "main@sha1:" + scriptHash(f[1]), Hash: scriptHash(f[1]),
		At: scriptT0.Add(time.Duration(atoi(t, sec)) * time.Second)}
	reason, msg := "", ""
	if name, ok := strings.CutPrefix(f[0], "git:"); ok {
		o.Emitter = ingest.Emitter("GitRepository", "flux-system", name)
	} else if name, ok := strings.CutPrefix(f[0], "oci:"); ok {
		o.Emitter = ingest.Emitter("OCIRepository", "apps", name)
	} else if name, ok := strings.CutPrefix(f[0], "hrs:"); ok {
		// A release's state read from the cluster's status.
		o.Emitter, o.Revision, o.Hash, o.Status, o.Commit = releaseOf(name), "", "", true, commitOf(f[1])
		switch {
		case event == "ok":
			event, reason, msg = "", "UpgradeSucceeded", "Helm upgrade succeeded for release apps/"+name+".v2 with chart "+name+"@1.0.0"
			o.Signal = rollout.SignalSucceeded
		case event == "prog":
			event, reason, msg = "", "Progressing", "Running 'upgrade' action with timeout of 5m0s"
			o.Signal = rollout.SignalProgressing
		case event == "pending":
			event, reason, msg = "", "Progressing", "helm-controller has not acted on this spec yet"
			o.Signal = rollout.SignalPending
		}
	} else if name, ok := strings.CutPrefix(f[0], "hr:"); ok {
		// A release's event names no revision: the model attributes it.
		o.Emitter, o.Revision, o.Hash, o.Commit = releaseOf(name), "", "", commitOf(f[1])
		switch {
		case event == "ok":
			event, reason, msg = "", "UpgradeSucceeded", "Helm upgrade succeeded for release apps/"+name+".v2 with chart "+name+"@1.0.0"
			o.Signal = rollout.SignalSucceeded
		case event == "rollback", event == "uninstall":
			// A remediation's event: the version it names is v=N (1).
			step := rollout.Step{Kind: rollout.StepRolledBack, Version: 1, Reason: "RollbackSucceeded", At: o.At}
			reason, msg = step.Reason, "Helm rollback to previous release apps/"+name+".v1 with chart "+name+"@1.0.0 succeeded"
			if event == "uninstall" {
				step.Kind, step.Reason = rollout.StepUninstalled, "UninstallSucceeded"
				reason, msg = step.Reason, "Helm uninstall remediation for release apps/"+name+".v1 with chart "+name+"@1.0.0 succeeded"
			}
			event, o.Signal, o.Remedy = "", rollout.SignalProgressing, &rollout.Remedy{Steps: []rollout.Step{step}}
		}
	} else {
		o.Emitter = layerOf(f[0])
	}
	switch {
	case event == "":
	case event == "ok":
		o.Signal, reason, msg = rollout.SignalSucceeded, "ReconciliationSucceeded", "Reconciliation finished in 1s, next run in 5m0s"
	case event == "prog":
		o.Signal, reason, msg = rollout.SignalProgressing, "Progressing", "ConfigMap/x/y configured"
	case event == "wait":
		o.Signal, reason, msg = rollout.SignalWaiting, "DependencyNotReady", "Dependencies do not meet ready condition, retrying in 30s"
	case event == "cancel":
		o.Signal, reason, msg = rollout.SignalCanceled, "HealthCheckCanceled", "Health checks canceled"
	case event == "artifact":
		o.Signal = rollout.SignalArtifact
	case event == "suspended":
		o.Signal = rollout.SignalSuspended
	case strings.HasPrefix(event, "member(") && strings.HasSuffix(event, ")"), event == "member":
		o.Signal = rollout.SignalExpected
		if deps := strings.TrimSuffix(strings.TrimPrefix(event, "member("), ")"); deps != "" && deps != "member" {
			for _, d := range strings.Split(deps, "+") {
				o.DependsOn = append(o.DependsOn, ns+d)
			}
		}
	case strings.HasPrefix(event, "fail(") && strings.HasSuffix(event, ")"):
		reason = strings.TrimSuffix(strings.TrimPrefix(event, "fail("), ")")
		o.Signal, msg, o.Class = rollout.SignalFailed, reason+" on "+f[0], ingest.FailureClass(reason)
	default:
		t.Fatalf("observation %q: unknown event %q", s, event)
	}
	o.Reason, o.Message = reason, msg
	for _, kv := range f[3:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "to":
			o.MailTo = append(o.MailTo, v+"@example.com")
		case "obj":
			p := strings.SplitN(v, "/", 3)
			if len(p) != 3 {
				t.Fatalf("observation %q: obj=Kind/namespace/name", s)
			}
			o.Objects = append(o.Objects, rollout.Object{Kind: p[0], Namespace: p[1], Name: p[2], Error: "forbidden"})
		case "subject":
			o.Subject = strings.ReplaceAll(v, "_", " ")
		case "applied":
			o.Applied = scriptT0.Add(time.Duration(atoi(t, v)) * time.Second)
		case "layer":
			o.Layer = layerOf(v)
		case "commit":
			o.Commit = v
		case "holds":
			for _, name := range strings.Split(v, "+") {
				o.Holds = append(o.Holds, releaseOf(name))
			}
		case "v": // the version a remediation's event names
			o.Remedy.Steps[0].Version = atoi(t, v)
			o.Message = strings.Replace(o.Message, ".v1 ", ".v"+v+" ", 1)
		case "attempts", "remedied", "step", "stalled":
			// What a release's status says helm-controller did after a
			// failure: its failure counter, how many of those attempts the
			// remediation of its Remediated condition (step=rollback:V or
			// uninstall:V) followed, and Stalled's second.
			if o.Remedy == nil {
				o.Remedy = &rollout.Remedy{}
			}
			rm := o.Remedy
			switch k {
			case "attempts":
				rm.Attempts = atoi(t, v)
			case "remedied":
				rm.Remedied = atoi(t, v)
			case "step":
				kind, ver, _ := strings.Cut(v, ":")
				st := rollout.Step{Kind: rollout.StepRolledBack, Version: atoi(t, ver), Reason: "RollbackSucceeded", At: o.At}
				if kind == "uninstall" {
					st.Kind, st.Reason = rollout.StepUninstalled, "UninstallSucceeded"
				}
				rm.Steps = append(rm.Steps, st)
			case "stalled":
				action := "upgrade"
				if o.Reason == "InstallFailed" {
					action = "install"
				}
				rm.Stalled = &rollout.Mark{At: scriptT0.Add(time.Duration(atoi(t, v)) * time.Second), Signal: rollout.SignalFailed,
					Reason: "RetriesExceeded", Message: "Failed to " + action + " after " + strconv.Itoa(rm.Attempts) + " attempt(s)"}
			}
		default:
			t.Fatalf("observation %q: unknown %q", s, kv)
		}
	}
	return o
}

// commitOf is what a release's report names of commit LABEL: the 12 hex
// digits source-controller puts in a chart's version; none for "-".
func commitOf(label string) string {
	if label == "-" {
		return ""
	}
	return scriptHash(label)[:12]
}

func releaseOf(name string) rollout.Emitter {
	return ingest.Emitter("HelmRelease", "apps", name)
}

func layerOf(name string) rollout.Emitter {
	return ingest.Layer("flux-system", name)
}

// labelOf is the label whose hash a revision names, among R0 to R9 and
// Q0, or the revision.
func labelOf(rev string) string {
	for _, l := range []string{"R0", "R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9", "Q0"} {
		if rev == "main@sha1:"+scriptHash(l) {
			return l
		}
	}
	return rev
}

func short(layers string) string { return strings.ReplaceAll(layers, ns, "") }

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestReleaseAfterItsLastRolloutSettled: a release whose last rollout
// settled (its layer moved on to commits that did not change it) holds the
// next commit that changes it, and that commit's reports of it count: the
// release's settled history is no reason to ignore them.
func TestReleaseAfterItsLastRolloutSettled(t *testing.T) {
	m, err := rollout.NewModel(rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	at := func(sec int) time.Time { return scriptT0.Add(time.Duration(sec) * time.Second) }
	views := map[string]*rollout.View{}
	apply := func(now time.Time, lines ...string) {
		for _, l := range lines {
			o := parseObservation(t, l)
			if err := m.Normalise(&o); err != nil {
				t.Fatal(err)
			}
			c := &rollout.Change{}
			m.Apply(c, [][]rollout.Observation{{o}}, nil, now)
			m.Verify()
			for _, v := range c.Views {
				views[v.Hash] = v
			}
		}
	}
	apply(at(20), "apps R1 prog@9 holds=web", "apps R1 ok@9", "hr:web - ok@12")
	apply(at(200), "apps R2 ok@100")
	c := &rollout.Change{}
	if n, _ := m.Settle(c, at(3*3600), func() bool { return false }); n != 1 {
		t.Fatalf("settled %d rollouts, want R1", n)
	}
	apply(at(8010), "apps R3 prog@8000 holds=web", "apps R3 ok@8000", "hr:web - ok@8005")
	if v := views[scriptHash("R3")]; v == nil || v.Verdict != rollout.VerdictApplied {
		t.Fatalf("R3: %+v", views[scriptHash("R3")])
	}
}

// TestUnreadRevisionsGo: the revisions of a source no layer reads (a
// chart's) are no rollouts; once their source moved on and they were quiet
// for SettleAfter, they leave memory and the store, the current one stays.
func TestUnreadRevisionsGo(t *testing.T) {
	m, err := rollout.NewModel(rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	at := func(sec int) time.Time { return scriptT0.Add(time.Duration(sec) * time.Second) }
	for _, l := range []string{"oci:web-chart C1 artifact@0", "oci:web-chart C2 artifact@60", "oci:web-chart C3 artifact@120"} {
		o := parseObservation(t, l)
		if err := m.Normalise(&o); err != nil {
			t.Fatal(err)
		}
		c := &rollout.Change{}
		m.Apply(c, [][]rollout.Observation{{o}}, nil, at(130))
		if len(c.Views) != 0 || len(c.Mails) != 0 {
			t.Fatalf("%s: views %d, mails %d", l, len(c.Views), len(c.Mails))
		}
	}
	c := &rollout.Change{}
	m.Settle(c, at(600), func() bool { return false })
	if len(c.Deletes) != 0 {
		t.Fatalf("before SettleAfter: %d records deleted", len(c.Deletes))
	}
	c = &rollout.Change{}
	m.Settle(c, at(2*3600), func() bool { return false })
	var gone []string
	for _, k := range c.Deletes {
		gone = append(gone, k.Hash)
	}
	slices.Sort(gone)
	want := []string{scriptHash("C1"), scriptHash("C2")}
	slices.Sort(want)
	if !slices.Equal(gone, want) || len(c.Floors) != 0 || len(c.Settle) != 0 {
		t.Fatalf("deleted %v (want C1, C2), floors %v, settled %d", gone, c.Floors, len(c.Settle))
	}
}

// TestNormaliseReleases: a release's observation names no revision (the
// model gives it one), and only a layer holds releases, only releases.
func TestNormaliseReleases(t *testing.T) {
	m, err := rollout.NewModel(rollout.Config{StuckAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ok := parseObservation(t, "hr:web - ok@1")
	withRev := ok
	withRev.Revision, withRev.Hash = "main@sha1:"+scriptHash("R1"), scriptHash("R1")
	byRelease := ok
	byRelease.Holds = []rollout.Emitter{releaseOf("api")}
	holdsLayer := parseObservation(t, "apps R1 prog@1")
	holdsLayer.Holds = []rollout.Emitter{layerOf("infra")}
	layerRelease := ok
	layerRelease.Layer = releaseOf("api")
	for _, tt := range []struct {
		name string
		o    rollout.Observation
		ok   bool
	}{
		{"a release's", ok, true},
		{"a release's with a revision", withRev, false},
		{"a release holding one", byRelease, false},
		{"a layer holding a layer", holdsLayer, false},
		{"a layer holding a release", parseObservation(t, "apps R1 prog@1 holds=web"), true},
		{"a release's naming its commit and layer", parseObservation(t, "hrs:web R1 ok@1 layer=apps"), true},
		{"a release's naming a full commit", parseObservation(t, "hr:web - ok@1 commit="+scriptHash("R1")), true},
		// How a commit is spelled is the edge's to check (flux.IsCommit):
		// the model matches what it is given as a prefix of its hashes.
		{"a layer's naming a commit", parseObservation(t, "apps R1 ok@1 commit=abcdef12"), false},
		{"a release's naming a release as its layer", layerRelease, false},
	} {
		if err := m.Normalise(&tt.o); (err == nil) != tt.ok || err != nil && !errors.Is(err, rollout.ErrInvalid) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
