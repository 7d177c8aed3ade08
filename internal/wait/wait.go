// Package wait is the pipeline's gate: it long-polls a service's /verdict
// until a commit's verdict on each cluster is terminal, follows a commit
// that went out inside a later one (asking git, skipped.go), and speaks
// the pipeline's language: text, JSON, GitHub annotations and step
// summary, GitLab sections. cmd's wait command gives it its options.
package wait

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Code is how a wait ends, for pipelines: Run returns nil when every
// cluster applied the commit, a Code otherwise.
type Code int

const (
	Failed  Code = 1 // failed, stuck, or superseded (unless followed)
	Timeout Code = 2 // timed out, or still unknown
	Trouble Code = 3 // usage, authentication or connection errors after retries
)

func (c Code) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// DefaultAttempts is the default of Options.Attempts.
const DefaultAttempts = 5

// verdictBody is what /verdict answers: a verdict, or an error.
type verdictBody struct {
	api.VerdictResponse
	edge.Error
}

// Options are what to wait for, and how.
type Options struct {
	URL      string // the service's base URL
	Rev      string // the commit: a full revision, a hash or a prefix (checked by flux.ParseQuery)
	Token    string // the verdict token, when the service requires one
	Timeout  time.Duration
	Clusters []string // [""]: the one cluster the commit deploys to
	// Follow waits, when a rollout is superseded, for the newer revision
	// and takes its verdict.
	Follow   bool
	Attempts int  // tries in a row when the service cannot be reached
	JSON     bool // the final verdicts as JSON on stdout, the rest on stderr
	// Gate is the promotion gate (gate.go): once applied on a cluster,
	// the commit must stay Soak there with nothing failing.
	Gate bool
	Soak time.Duration
	// ExternalURL is the service's URL as people reach it: the CI summary
	// links each rollout's status page.
	ExternalURL string
	// GitDir is the repository holding the commit, to find the later
	// revision it went out in; Ancestry off waits for the commit itself.
	GitDir   string
	Ancestry bool
	// Getenv reads the pipeline's environment: which CI runs it
	// (GITHUB_ACTIONS, GITLAB_CI, GITHUB_STEP_SUMMARY) and git's PATH.
	Getenv func(string) string
}

// Run waits on every cluster at once until each verdict is terminal or
// the timeout passes, prints each cluster's block in the order given, and
// returns the worst outcome: nil when all applied.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	human := stdout
	if o.JSON {
		human = stderr
	}
	deadline := time.Now().Add(o.Timeout)
	progress := &lines{w: human}
	var git *gitSide
	if o.Ancestry {
		git = &gitSide{path: o.Getenv("PATH"), dir: o.GitDir, rev: o.Rev, progress: progress}
	}
	waiters := make([]*waiter, len(o.Clusters))
	for i, c := range o.Clusters {
		waiters[i] = &waiter{base: strings.TrimRight(o.URL, "/"), token: o.Token, cluster: c, stderr: stderr, attempts: o.Attempts,
			client: &http.Client{Timeout: api.MaxWait + 30*time.Second}, progress: progress}
		if git != nil {
			waiters[i].skipped = &descendants{git: git, w: waiters[i]}
		}
	}
	// Each cluster's changes are printed as they come, its block whole at
	// the end.
	outs := make([]bytes.Buffer, len(o.Clusters))
	codes := make([]error, len(o.Clusters))
	var wg sync.WaitGroup
	for i, w := range waiters {
		wg.Go(func() {
			codes[i] = w.until(ctx, o.Rev, deadline, o.Timeout, o.Follow || o.Gate, &outs[i])
			if codes[i] == nil && o.Gate {
				codes[i] = w.soak(ctx, o.Soak, deadline, &outs[i])
			}
		})
	}
	wg.Wait()
	ci := ciOf(o.Getenv)
	for i, c := range o.Clusters {
		if ci == gitlab {
			// A collapsible section per cluster, its verdict in the header.
			fmt.Fprintf(human, "\x1b[0Ksection_start:%d:fdn_%s[collapsed=%t]\r\x1b[0K%s\n", time.Now().Unix(), sectionName(c), codes[i] == nil, waiters[i].headline())
		} else if len(o.Clusters) > 1 {
			fmt.Fprintf(human, "== %s\n", c)
		}
		_, _ = outs[i].WriteTo(human)
		if ci == gitlab {
			fmt.Fprintf(human, "\x1b[0Ksection_end:%d:fdn_%s\r\x1b[0K\n", time.Now().Unix(), sectionName(c))
		}
	}
	code := worst(codes)
	if ci == github {
		annotate(human, waiters)
		if path := o.Getenv("GITHUB_STEP_SUMMARY"); path != "" {
			if err := appendSummary(path, o.Rev, strings.TrimRight(o.ExternalURL, "/"), waiters); err != nil {
				fmt.Fprintln(stderr, "wait: step summary:", err)
			}
		}
	}
	if o.JSON {
		writeResult(stdout, o.Rev, code, waiters, codes)
	}
	return code
}

// Result is what --output json prints: the exit code and each
// cluster's outcome with its last verdict (null when never seen).
type Result struct {
	Rev      string          `json:"rev"`
	Exit     int             `json:"exit"`
	Clusters []ClusterResult `json:"clusters"`
}

// ClusterResult is one cluster's outcome in a Result.
type ClusterResult struct {
	Cluster string `json:"cluster,omitempty"`
	Outcome string `json:"outcome"` // the verdict, or timeout, unknown, trouble
	// DeployedIn is the later commit the commit went out in, when it did
	// not deploy on its own; the verdict is that commit's.
	DeployedIn string               `json:"deployed_in,omitempty"`
	Verdict    *api.VerdictResponse `json:"verdict"`
	// Why says why an unknown commit is unknown.
	Why string `json:"why,omitempty"`
	// With --promote-from, once it applied: when its soak ends, and what
	// failed within it (the outcome is then "soak-failed"; "soaking" while
	// the soak is not over).
	SoakEnds    *time.Time `json:"soak_ends,omitempty"`
	SoakFailure string     `json:"soak_failure,omitempty"`
}

func writeResult(out io.Writer, rev string, code error, waiters []*waiter, codes []error) {
	res := Result{Rev: rev, Exit: exitOf(code)}
	for i, w := range waiters {
		cr := ClusterResult{Cluster: w.cluster}
		if w.via != nil {
			cr.DeployedIn = w.via.Hash
		}
		var c Code
		switch {
		case errors.As(codes[i], &c) && c == Trouble:
			cr.Outcome = "trouble"
		case w.last == nil:
			cr.Outcome = "unknown"
			if w.skipped != nil {
				cr.Why = w.skipped.why()
			}
		case !w.last.Terminal:
			cr.Outcome = "timeout"
		case w.soakFailure != "":
			cr.Outcome = "soak-failed"
		case w.soakEnds != nil && codes[i] != nil:
			cr.Outcome = "soaking"
		default:
			cr.Outcome = w.last.Verdict.String()
		}
		cr.SoakEnds, cr.SoakFailure = w.soakEnds, w.soakFailure
		if w.last != nil {
			cr.Verdict = &w.last.VerdictResponse
		}
		res.Clusters = append(res.Clusters, cr)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	fmt.Fprintln(out, string(b))
}

func exitOf(err error) int {
	var c Code
	if errors.As(err, &c) {
		return int(c)
	}
	return 0
}

// lines writes whole lines from several goroutines.
type lines struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lines) printf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", a...)
}

// report prints what changed since the last answer: one line for the
// verdict, one per layer that moved.
func (w *waiter) report(v *verdictBody) {
	where := v.Revision
	if v.Hash != "" {
		where = flux.Short(v.CommitHash())
	}
	where += " on " + v.Cluster
	prev := w.last
	switch {
	case prev == nil:
		w.progress.printf("%s: %s (%s)", where, v.Verdict, v.Summary)
	case prev.Verdict != v.Verdict:
		w.progress.printf("%s: %s -> %s (%s)", where, prev.Verdict, v.Verdict, v.Summary)
	}
	before := map[string]rollout.LayerView{}
	if prev != nil && prev.Hash == v.Hash {
		for _, l := range prev.Layers.All() {
			before[l.Name] = l
		}
	}
	for _, l := range v.Layers.All() {
		b, seen := before[l.Name]
		if seen && b.State == l.State {
			continue
		}
		if !seen && prev == nil && l.State == rollout.LayerPending {
			continue // nothing to tell yet
		}
		from := ""
		if seen {
			from = string(b.State) + " -> "
		}
		line := fmt.Sprintf("%s: %s %s%s", where, l.Name, from, l.State)
		if l.Reason != "" {
			line += " (" + l.Reason + ")"
		}
		w.progress.printf("%s", line)
	}
}

// worst is the exit of a wait on several clusters: 0 when all applied;
// otherwise a failure (failed, stuck, superseded) anywhere, then a timeout
// or an unknown commit, then trouble asking.
func worst(codes []error) error {
	var out error
	rank := func(err error) int {
		var c Code
		switch {
		case err == nil:
			return 0
		case errors.As(err, &c) && c == Failed:
			return 3
		case errors.As(err, &c) && c == Timeout:
			return 2
		}
		return 1
	}
	for _, err := range codes {
		if rank(err) > rank(out) {
			out = err
		}
	}
	return out
}

// until waits for the commit's verdict on w's cluster until it is terminal
// or the deadline passes, prints it to out, and returns the exit code.
func (w *waiter) until(ctx context.Context, rev string, deadline time.Time, timeout time.Duration, follow bool, out io.Writer) error {
	query, skipped := rev, w.skipped
	for {
		v, in, err := w.poll(ctx, query, deadline, skipped)
		if err != nil {
			fmt.Fprintln(w.stderr, "wait:", err)
			return Trouble
		}
		if in != nil {
			// Its verdict is the commit's: it deployed inside it.
			w.progress.printf("%s on %s: not deployed on its own; %s contains it: waiting for its verdict", flux.Short(rev), in.Cluster, flux.Short(in.CommitHash()))
			w.via, query, skipped = in, in.Hash, nil
			continue
		}
		if w.via != nil && v != nil {
			fmt.Fprintf(out, "%s was not deployed on its own: it went out in %s, %s\n", flux.Short(rev), flux.Short(v.CommitHash()), v.Verdict)
		}
		switch {
		case v == nil || !v.Terminal:
			printVerdict(out, v, query)
			if why := skipped.why(); v == nil && why != "" {
				fmt.Fprintln(out, "  "+why)
			}
			fmt.Fprintf(out, "timed out after %s\n", timeout)
			return Timeout
		case v.Verdict == rollout.VerdictSuperseded && follow && v.SupersededBy != nil:
			fmt.Fprintf(out, "%s was superseded by %s: following it\n", v.Revision, *v.SupersededBy)
			query = *v.SupersededBy
			continue
		}
		printVerdict(out, v, query)
		if v.Verdict == rollout.VerdictApplied {
			return nil
		}
		return Failed
	}
}

type waiter struct {
	base, token, cluster string
	attempts             int
	client               *http.Client
	stderr               io.Writer
	progress             *lines
	last                 *verdictBody // the last verdict seen
	// skipped finds the later rollout a commit went out in; nil with
	// --no-ancestry.
	skipped *descendants
	via     *rollout.View // that rollout, once found
	// The soak, once it began (--promote-from): when it ends, and what
	// failed within it.
	soakEnds    *time.Time
	soakFailure string
}

// pollEvery bounds one long poll, so that changes before the verdict is
// final (a layer moving) are reported as they come.
const pollEvery = 10 * time.Second

// poll asks until the verdict is terminal or the deadline passes; nil
// means never seen. While the commit is unknown, skipped (when not nil)
// looks for a later rollout that contains it, returned as in. Connection
// errors and 5xx are retried, a few times.
func (w *waiter) poll(ctx context.Context, query string, deadline time.Time, skipped *descendants) (*verdictBody, *rollout.View, error) {
	var last *verdictBody
	failures, asked := 0, false
	for {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return last, nil, nil
		}
		q := url.Values{"rev": {query}}
		if asked {
			q.Set("wait", min(remaining, pollEvery).Round(time.Second).String())
		}
		// The first answer comes at once: the state to start reporting from.
		asked = true
		if w.cluster != "" {
			q.Set("cluster", w.cluster)
		}
		v, status, err := w.get(ctx, w.base+"/verdict?"+q.Encode())
		if err == nil && status >= 500 {
			err = fmt.Errorf("%d from the service", status)
		}
		if err == nil && status == http.StatusNotFound && skipped != nil {
			var in *rollout.View
			if in, err = skipped.find(ctx); in != nil {
				return nil, in, nil
			}
		}
		switch {
		case err != nil:
			failures++
			if failures >= w.attempts {
				return nil, nil, fmt.Errorf("giving up after %d attempts: %w", failures, err)
			}
			fmt.Fprintf(w.stderr, "wait: %v; retrying\n", err)
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(min(time.Duration(1<<(failures-1))*time.Second, time.Until(deadline))):
			}
			continue
		case status == http.StatusUnauthorized:
			return nil, nil, errors.New("the service wants a verdict token (--token-file)")
		case status == http.StatusNotFound:
			last = nil
		case status == http.StatusOK:
			last = v
			w.report(v)
			w.last = v
		default:
			return nil, nil, fmt.Errorf("%d from the service: %s", status, v.Message)
		}
		failures = 0
		if last != nil && last.Terminal {
			return last, nil, nil
		}
	}
}

func (w *waiter) get(ctx context.Context, u string) (*verdictBody, int, error) {
	v := &verdictBody{VerdictResponse: api.VerdictResponse{View: &rollout.View{}}}
	status, err := w.getJSON(ctx, u, 4<<20, v)
	if err != nil {
		return nil, 0, err
	}
	return v, status, nil
}

// getJSON asks the service for u, with the verdict token, and decodes its
// answer (at most limit bytes) into into; a 5xx answer need not be JSON.
func (w *waiter) getJSON(ctx context.Context, u string, limit int64, into any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if w.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, limit)).Decode(into); err != nil && resp.StatusCode < 500 {
		return 0, fmt.Errorf("read the answer to %s: %w", req.URL.Path, err)
	}
	return resp.StatusCode, nil
}

// printVerdict is the short human summary a pipeline log shows.
func printVerdict(out io.Writer, v *verdictBody, query string) {
	if v == nil {
		fmt.Fprintf(out, "%s: unknown (no evidence of this revision yet)\n", query)
		return
	}
	fmt.Fprintf(out, "%s on %s: %s (%s)\n", v.Named(), v.Cluster, v.Verdict, v.Summary)
	for _, l := range v.Layers.All() {
		line := fmt.Sprintf("  %-32s %-12s", l.Name, string(l.State))
		if l.Reason != "" {
			line += " " + l.Reason
		}
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
	for _, f := range v.Failures {
		if f.AfterApplied {
			continue
		}
		fmt.Fprintf(out, "failure: %s\n", failureTitle(f))
		for _, o := range f.Objects {
			name := o.Name
			if o.Namespace != "" {
				name = o.Namespace + "/" + o.Name
			}
			fmt.Fprintf(out, "  %s %s: %s\n", o.Kind, name, o.Error)
		}
		if len(f.Objects) == 0 {
			msg := failureMessage(f)
			if len(msg) > 400 {
				msg = msg[:400] + "…"
			}
			fmt.Fprintf(out, "  %s\n", msg)
		}
		if f.Remediation != "" {
			fmt.Fprintf(out, "  then: %s\n", f.Remediation)
		}
	}
	if v.RootCause != "" && v.Verdict == rollout.VerdictStuck {
		fmt.Fprintf(out, "root cause: %s\n", v.RootCause)
	}
}

// failureMessage is what a failure says: a release's is Helm's error
// line, without the logs helm-controller adds (the page has them).
func failureMessage(f rollout.FailureView) string {
	if f.Release == (rollout.Ref{}) {
		return f.Message
	}
	return flux.ReleaseError(f.Message)
}

// failureTitle names a failure: its layer, the release inside it whose
// failure it is, and Flux's reason.
func failureTitle(f rollout.FailureView) string {
	if f.Release != (rollout.Ref{}) {
		return f.Layer + " " + f.Release.String() + " " + f.Reason
	}
	return f.Layer + " " + f.Reason
}

// The CI systems whose own output wait speaks.
type ciKind int

const (
	plainCI ciKind = iota
	github
	gitlab
)

func ciOf(getenv func(string) string) ciKind {
	switch {
	case getenv("GITHUB_ACTIONS") == "true":
		return github
	case getenv("GITLAB_CI") == "true":
		return gitlab
	}
	return plainCI
}

// headline is one cluster's outcome in a line.
func (w *waiter) headline() string {
	cluster, v := w.cluster, w.last
	if cluster == "" {
		cluster = "the service's cluster"
	}
	switch {
	case v == nil:
		return cluster + ": unknown"
	case !v.Terminal:
		return cluster + ": " + v.Verdict.String() + " (timed out)"
	case w.soakFailure != "":
		return cluster + ": soak failed (" + w.soakFailure + ")"
	case w.soakEnds != nil && time.Now().Before(*w.soakEnds):
		return cluster + ": applied, soaking until " + w.soakEnds.UTC().Format(time.RFC3339) + " (timed out)"
	}
	return cluster + ": " + v.Verdict.String() + " (" + w.summary() + ")"
}

// summary is the verdict's summary, saying when it is that of a later
// commit the one waited on went out in.
func (w *waiter) summary() string {
	if w.via != nil {
		return "went out in " + flux.Short(w.via.CommitHash()) + ": " + w.last.Summary
	}
	return w.last.Summary
}

// sectionName is a cluster's name as GitLab takes one in a section marker.
func sectionName(cluster string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, cluster)
}

// annotate writes GitHub Actions error annotations: one per failure of a
// layer (naming its reason and objects), and one for a stuck or superseded
// rollout.
func annotate(out io.Writer, waiters []*waiter) {
	for _, w := range waiters {
		v := w.last
		if v == nil || !v.Terminal || v.Verdict == rollout.VerdictApplied && w.soakFailure == "" {
			continue
		}
		where := v.Cluster
		for _, f := range v.Failures {
			if f.AfterApplied {
				continue
			}
			msg := failureMessage(f)
			for _, o := range f.Objects {
				msg += "\n" + o.Kind + " " + o.Namespace + "/" + o.Name + ": " + o.Error
			}
			if f.Remediation != "" {
				msg += "\nthen: " + f.Remediation
			}
			fmt.Fprintf(out, "::error title=%s::%s\n", ghProperty(where+": "+failureTitle(f)), ghData(msg))
		}
		switch v.Verdict {
		case rollout.VerdictApplied:
			if w.soakFailure != "" {
				fmt.Fprintf(out, "::error title=%s::%s\n", ghProperty(where+": soak failed"), ghData(w.soakFailure))
			}
		case rollout.VerdictStuck:
			fmt.Fprintf(out, "::error title=%s::%s\n", ghProperty(where+": stuck on "+v.RootCause), ghData(v.Summary))
		case rollout.VerdictSuperseded:
			fmt.Fprintf(out, "::error title=%s::%s\n", ghProperty(where+": superseded"), ghData(v.Summary))
		}
	}
}

// ghData and ghProperty escape text for a GitHub Actions workflow command.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// appendSummary adds a Markdown summary to the job's step summary: each
// cluster's verdict, its layers with their times, and a link to the
// rollout's status page when the service's external URL is known.
func appendSummary(path, rev, externalURL string, waiters []*waiter) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### Deploy of `%s`\n\n| cluster | verdict | summary |\n|---|---|---|\n", mdCell(rev))
	for _, w := range waiters {
		v := w.last
		if v == nil {
			why := "no evidence of this commit"
			if s := w.skipped.why(); s != "" {
				why += "; " + s
			}
			fmt.Fprintf(&b, "| %s | unknown | %s |\n", mdCell(w.cluster), mdCell(why))
			continue
		}
		verdict := v.Verdict.String()
		switch {
		case !v.Terminal:
			verdict += " (timed out)"
		case w.soakFailure != "":
			verdict += ", soak failed"
		case w.soakEnds != nil && time.Now().Before(*w.soakEnds):
			verdict += ", soaking (timed out)"
		case w.soakEnds != nil:
			verdict += ", soaked"
		}
		if externalURL != "" {
			verdict = "[" + verdict + "](" + externalURL + edge.RolloutPath(v.Key()) + ")"
		}
		summary := w.summary()
		if w.soakFailure != "" {
			summary += "; soak failed: " + w.soakFailure
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mdCell(v.Cluster), verdict, mdCell(summary))
	}
	for _, w := range waiters {
		v := w.last
		if v == nil {
			continue
		}
		fmt.Fprintf(&b, "\n#### %s\n\n| layer | state | reason | at |\n|---|---|---|---|\n", mdCell(v.Cluster))
		for _, l := range v.Layers.All() {
			at := ""
			if l.At != nil {
				at = l.At.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCell(l.Name), l.State, mdCell(l.Reason), at)
			for _, rv := range l.Releases {
				at := ""
				if rv.At != nil {
					at = rv.At.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(&b, "| ↳ %s | %s | %s | %s |\n", mdCell(rv.Kind+" "+rv.Namespace+"/"+rv.Name), rv.State, mdCell(rv.Reason), at)
			}
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String() + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mdCell makes text safe in a Markdown table cell: no pipes or line
// breaks, no markup.
func mdCell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;", "`", "'", "[", "\\[", "]", "\\]").Replace(s)
}
