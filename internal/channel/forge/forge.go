// Package forge shows each rollout's verdict where developers look: a
// deployment of the commit in its repository's forge (GitHub, GitLab), or
// a commit status (Gitea), one per commit and cluster, following the
// verdict. The engine writes verdict changes, with what is shown of them,
// to the forge's outbox in the transaction that decides them
// (rollout.Published); an outbox.Dispatcher reads that outbox alone and
// delivers them through a Deliverer (NewDeliverer) at least once, in order
// per rollout, the latest state due replacing the ones not sent. The flags
// that configure a forge are cmd's (its table of forges).
package forge

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// State is a deployment's state in the forge.
type State string

const (
	StateInProgress State = "in_progress" // applying
	StateSuccess    State = "success"     // applied
	StateFailure    State = "failure"     // failed or stuck
	StateInactive   State = "inactive"    // superseded: a later commit replaced it
)

// StateOf is the forge state that shows v.
func StateOf(v rollout.Verdict) (State, bool) {
	switch v {
	case rollout.VerdictApplying:
		return StateInProgress, true
	case rollout.VerdictApplied:
		return StateSuccess, true
	case rollout.VerdictFailed, rollout.VerdictStuck:
		return StateFailure, true
	case rollout.VerdictSuperseded:
		return StateInactive, true
	}
	return "", false
}

// CommitState is the state of a commit status (GitHub's, Gitea's) that
// shows s; superseded is the forge's word for a commit that did not go out
// on its own (GitHub has error, Gitea and Forgejo warning).
func CommitState(s State, superseded string) string {
	switch s {
	case StateInProgress:
		return "pending"
	case StateSuccess:
		return "success"
	case StateFailure:
		return "failure"
	}
	return superseded
}

// Update is what one delivery tells the forge about one rollout.
type Update struct {
	Repo        Repo
	Environment string // the cluster's name
	Commit      string // the git commit deployed (full hash)
	State       State
	Verdict     rollout.Verdict
	Description string // at most MaxDescription characters
	LogURL      string // the rollout's status page, when the service knows its URL
	// Cluster and Revision are the rollout's, for the marker that finds
	// the forge's record of it again; Source its source.
	Cluster  string
	Revision string
	Source   rollout.Ref
}

// Repo is a repository on a forge: owner (or group path) and name.
type Repo struct {
	Owner string
	Name  string
}

func (r Repo) String() string { return r.Owner + "/" + r.Name }

// ParseRepo reads OWNER/NAME (a GitLab group path may have more slashes:
// the last one separates the name).
func ParseRepo(s string) (Repo, error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 || i == len(s)-1 || strings.ContainsAny(s, " \t\n?#") {
		return Repo{}, fmt.Errorf("repository %q: want OWNER/NAME", s)
	}
	return Repo{Owner: s[:i], Name: s[i+1:]}, nil
}

// Forge is one forge's API as the dispatcher uses it.
type Forge interface {
	// Name names the forge in logs, metrics and pages ("github").
	Name() string
	// Ensure returns the forge's record of u's rollout (a deployment's
	// id): found again by its marker when one was made before (a crash
	// between making it and recording it), else made.
	Ensure(ctx context.Context, u Update) (ref string, err error)
	// Status posts u's state on the record ref.
	Status(ctx context.Context, ref string, u Update) error
}

// Comparer is a forge that can say which commits went out inside a
// rollout's, and give each of them a commit status: the commits merged
// between the source's previously applied revision and the one applied
// (a merge queue's), which Flux never saw on their own.
type Comparer interface {
	// Compares reports whether the forge posts commit statuses (GitHub
	// only when its options say so).
	Compares() bool
	// Between lists up to max commits after base up to head, oldest
	// first.
	Between(ctx context.Context, repo Repo, base, head string, max int) ([]string, error)
	// StatusOf posts u's state as the commit status of commit, with desc.
	StatusOf(ctx context.Context, u Update, commit, desc string) error
}

// MaxInside bounds the commits given the status of the one they went out
// in: a page of the forges' compare APIs.
const MaxInside = 100

// MaxDescription is the longest description GitHub takes on a deployment
// status (and the shortest of the forges').
const MaxDescription = 140

// Describe is the one line the forge shows: the verdict and, when it
// failed or is stuck, which layer and why (the rollout's summary). Flux's
// text comes from the cluster: control characters become spaces, and it
// is cut to MaxDescription characters on a rune boundary.
func Describe(v rollout.Verdict, summary string) string {
	s := v.String()
	if summary != "" {
		s += ": " + summary
	}
	return Clean(s, MaxDescription)
}

// Clean makes text from Flux fit a forge's one-line field: no control
// characters, single spaces, at most n characters (runes), cut with "…".
func Clean(s string, n int) string {
	runes := []rune(strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return r == utf8.RuneError || unicode.IsControl(r) || unicode.IsSpace(r)
	}), " "))
	if len(runes) <= n {
		return string(runes)
	}
	return strings.TrimRight(string(runes[:n-1]), " ") + "…"
}
