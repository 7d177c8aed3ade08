// Package ancestry answers, from git, whether a later commit contains an
// earlier one: how a pipeline learns that its commit, never deployed on its
// own, went out inside a later one. The answer comes from the repository's
// history only; time bounds what is fetched, never what is concluded.
package ancestry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// Skew is how far before a commit's committer time its descendants'
// history is fetched, for clocks that disagree. It only widens what is
// fetched: a later commit still contains the earlier one only if git finds
// it in its history.
const Skew = time.Hour

// Commit is a commit of the repository.
type Commit struct {
	Hash string
	Time time.Time // committer time
}

// ErrUnavailable is what every reason git cannot be asked at all (not
// installed, not a repository) matches with errors.Is.
var ErrUnavailable = errors.New("git cannot be asked")

type unavailable string

func (u unavailable) Error() string        { return string(u) }
func (u unavailable) Is(target error) bool { return target == ErrUnavailable }

// Repo asks one git repository. It is safe for concurrent use; git runs
// one command at a time, as fetches into one repository must.
type Repo struct {
	git, dir, remote string
	mu               sync.Mutex
	known            map[[2]string]answer // (ancestor, descendant) -> answer
}

type answer struct {
	contains bool
	err      error
}

// Open finds git on path (a PATH list) and the repository at dir ("" is
// the working directory).
func Open(ctx context.Context, path, dir string) (*Repo, error) {
	git, err := lookPath("git", path)
	if err != nil {
		return nil, unavailable("git is not installed (not on PATH)")
	}
	if dir == "" {
		dir = "."
	}
	r := &Repo{git: git, dir: dir, known: map[[2]string]answer{}}
	if _, err := r.run(ctx, "rev-parse", "--git-dir"); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, unavailable(dir + " is not in a git repository (--git-dir)")
		}
		return nil, unavailable("run git: " + err.Error())
	}
	remotes, err := r.run(ctx, "remote")
	if err != nil {
		return nil, unavailable("list the remotes: " + err.Error())
	}
	// The remote to fetch descendants from: origin, as CI checkouts name
	// it, else the only one there is.
	names := strings.Fields(remotes)
	switch {
	case slices.Contains(names, "origin"):
		r.remote = "origin"
	case len(names) == 1:
		r.remote = names[0]
	}
	return r, nil
}

// Commit resolves rev (a hash or a prefix of one) to a commit, fetching it
// when it is a full hash the repository does not have.
func (r *Repo) Commit(ctx context.Context, rev string) (Commit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.has(ctx, rev) && r.remote != "" && (len(rev) == 40 || len(rev) == 64) {
		args := []string{"fetch", "--no-tags"}
		if r.shallow(ctx) {
			args = append(args, "--depth=1") // the commit alone: Contains deepens as it needs
		}
		if _, err := r.run(ctx, append(args, r.remote, rev)...); err != nil {
			return Commit{}, fmt.Errorf("fetch %s: %w", flux.Short(rev), err)
		}
	}
	out, err := r.run(ctx, "show", "-s", "--format=%H %ct", rev+"^{commit}", "--")
	if err != nil {
		return Commit{}, fmt.Errorf("%s is not a commit of this repository: %w", flux.Short(rev), err)
	}
	hash, ts, _ := strings.Cut(strings.TrimSpace(out), " ")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Commit{}, fmt.Errorf("read the time of %s: %q", flux.Short(rev), out)
	}
	return Commit{Hash: hash, Time: time.Unix(sec, 0).UTC()}, nil
}

// Contains tells whether descendant's history holds ancestor. A descendant
// the repository lacks is fetched; in a shallow repository its history is
// deepened back to Skew before the ancestor's time. An error means git
// could not tell (the descendant could not be fetched: another repository's
// commit, or the remote is unreachable); the answer is then false. Answers
// are remembered per descendant.
func (r *Repo) Contains(ctx context.Context, descendant string, ancestor Commit) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [2]string{ancestor.Hash, descendant}
	if a, ok := r.known[key]; ok {
		return a.contains, a.err
	}
	contains, err := r.contains(ctx, descendant, ancestor)
	if ctx.Err() == nil { // an answer cut short by the caller is not one
		r.known[key] = answer{contains, err}
	}
	return contains, err
}

func (r *Repo) contains(ctx context.Context, descendant string, ancestor Commit) (bool, error) {
	present := r.has(ctx, descendant)
	if present {
		yes, err := r.isAncestor(ctx, ancestor.Hash, descendant)
		if err != nil || yes {
			return yes, err
		}
		if !r.shallow(ctx) {
			return false, nil // the whole history is here: a definite no
		}
	}
	if r.remote == "" {
		return false, fmt.Errorf("%s is not here and the repository has no remote to fetch it from", flux.Short(descendant))
	}
	args := []string{"fetch", "--no-tags"}
	if r.shallow(ctx) {
		// Everything since just before the ancestor: the commits between
		// the two, and no older history than that.
		args = append(args, "--shallow-since="+strconv.FormatInt(ancestor.Time.Add(-Skew).Unix(), 10))
	}
	if _, err := r.run(ctx, append(args, r.remote, descendant)...); err != nil {
		if present {
			return false, fmt.Errorf("deepen the history of %s: %w", flux.Short(descendant), err)
		}
		return false, fmt.Errorf("fetch %s: %w", flux.Short(descendant), err)
	}
	return r.isAncestor(ctx, ancestor.Hash, descendant)
}

func (r *Repo) has(ctx context.Context, rev string) bool {
	_, err := r.run(ctx, "cat-file", "-e", rev+"^{commit}")
	return err == nil
}

func (r *Repo) shallow(ctx context.Context) bool {
	out, err := r.run(ctx, "rev-parse", "--is-shallow-repository")
	return err == nil && strings.TrimSpace(out) == "true"
}

// isAncestor runs git merge-base --is-ancestor: exit 0 yes, 1 no.
func (r *Repo) isAncestor(ctx context.Context, ancestor, descendant string) (bool, error) {
	_, err := r.run(ctx, "merge-base", "--is-ancestor", ancestor, descendant)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false, nil
	}
	return false, fmt.Errorf("merge-base %s %s: %w", flux.Short(ancestor), flux.Short(descendant), err)
}

// commandTimeout bounds one git command: a fetch from an unreachable
// remote must not hold the wait past its own checks.
const commandTimeout = 2 * time.Minute

// run runs git in the repository and returns its output; an error carries
// git's last line of complaint.
func (r *Repo) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.git, append([]string{"-C", r.dir}, args...)...)
	// Never prompt: a pipeline has nobody to answer.
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := lastLine(stderr.String()); msg != "" {
			return "", &gitError{msg: msg, err: err}
		}
		return "", err
	}
	return stdout.String(), nil
}

// gitError is a failed git command: what git said, and how it exited.
type gitError struct {
	msg string
	err error
}

func (e *gitError) Error() string { return e.msg }
func (e *gitError) Unwrap() error { return e.err }

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// lookPath finds an executable on a PATH list: exec.LookPath, but on the
// PATH the caller was given rather than the process's own.
func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}
