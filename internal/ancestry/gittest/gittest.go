// Package gittest makes real git repositories for tests: an origin with
// commits, branches and merges, and clones of it as CI checks them out.
package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Repo is a repository made by a test; Dir is its working tree.
type Repo struct {
	t   testing.TB
	Dir string
}

// New makes an empty repository with main checked out.
func New(t testing.TB) *Repo {
	t.Helper()
	return newRepo(t, "sha1")
}

// NewSHA256 makes an empty repository in git's sha256 object format
// (64-hex commits), with main checked out.
func NewSHA256(t testing.TB) *Repo {
	t.Helper()
	return newRepo(t, "sha256")
}

func newRepo(t testing.TB, format string) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("these tests need git: apt-get install git")
	}
	r := &Repo{t: t, Dir: filepath.Join(t.TempDir(), "origin")}
	if err := os.Mkdir(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.Git("init", "-q", "-b", "main", "--object-format="+format)
	return r
}

// Git runs git in the repository and returns its trimmed output.
func (r *Repo) Git(args ...string) string {
	r.t.Helper()
	return Git(r.t, r.Dir, args...)
}

// Git runs git in dir with a fixed identity and returns its trimmed output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return gitEnv(t, dir, nil, args...)
}

func gitEnv(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=Test", "-c", "user.email=test@example.com",
		"-c", "commit.gpgsign=false", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Env = append(append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "LC_ALL=C"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit commits a change on the current branch and returns its hash.
func (r *Repo) Commit(msg string) string {
	r.t.Helper()
	return r.CommitAt(msg, time.Time{})
}

// CommitAt commits a change dated at (author and committer; zero is now).
func (r *Repo) CommitAt(msg string, at time.Time) string {
	r.t.Helper()
	var env []string
	if !at.IsZero() {
		d := at.UTC().Format(time.RFC3339)
		env = []string{"GIT_AUTHOR_DATE=" + d, "GIT_COMMITTER_DATE=" + d}
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "file"), []byte(msg+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.Git("add", "file")
	gitEnv(r.t, r.Dir, env, "commit", "-q", "-m", msg)
	return r.Git("rev-parse", "HEAD")
}

// Branch makes branch at from and checks it out.
func (r *Repo) Branch(branch, from string) { r.t.Helper(); r.Git("checkout", "-q", "-b", branch, from) }

// Checkout checks out a branch.
func (r *Repo) Checkout(branch string) { r.t.Helper(); r.Git("checkout", "-q", branch) }

// Merge merges branch into the current one with a merge commit and
// returns its hash.
func (r *Repo) Merge(branch string) string {
	r.t.Helper()
	r.Git("merge", "-q", "--no-ff", "-X", "theirs", "-m", "Merge "+branch, branch)
	return r.Git("rev-parse", "HEAD")
}

// Clone clones the repository the way CI checks out: with depth > 0 a
// shallow clone of the current branch's head over file://.
func (r *Repo) Clone(depth int) string {
	r.t.Helper()
	dir := filepath.Join(r.t.TempDir(), "checkout")
	args := []string{"clone", "-q", "--no-local"}
	if depth > 0 {
		args = append(args, "--depth", strconv.Itoa(depth))
	}
	Git(r.t, r.Dir, append(args, "file://"+r.Dir, dir)...)
	return dir
}

// Has tells whether the repository at dir holds the commit.
func Has(dir, rev string) bool {
	return exec.Command("git", "-C", dir, "cat-file", "-e", rev+"^{commit}").Run() == nil
}
