package gitea_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/forgetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/gitea"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// server is a real Gitea (make testbin builds bin/gitea from its Go
// module) on loopback, with SQLite in a temporary directory: an admin
// user, its token, and a repository with one commit.
type server struct {
	url, token string
	repo       forge.Repo
	head       string // the repository's commit
	user, pass string
}

func startGitea(t *testing.T) *server {
	t.Helper()
	bin := clustertest.Binary(t, "gitea")
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{url: fmt.Sprintf("http://127.0.0.1:%d", port), user: "fdn", pass: "Passw0rd!fdn"}
	// Tests run as root in CI; Gitea refuses root unless told.
	ini := fmt.Sprintf(`RUN_USER = %s
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true
WORK_PATH = %[2]s
[database]
DB_TYPE = sqlite3
PATH = %[2]s/gitea.db
[repository]
ROOT = %[2]s/repos
[server]
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[3]d
ROOT_URL = %[4]s/
DISABLE_SSH = true
OFFLINE_MODE = true
APP_DATA_PATH = %[2]s/data
LFS_START_SERVER = false
STATIC_ROOT_PATH = %[5]s
[security]
INSTALL_LOCK = true
SECRET_KEY = fdn-test-secret-key-0123456789abcdef
[service]
DISABLE_REGISTRATION = true
[log]
MODE = console
LEVEL = Warn
[oauth2]
ENABLED = false
[cron]
ENABLED = false
`, currentUser(t), dir, port, s.url, filepath.Join(clustertest.BinDir(), "gitea-assets"))
	conf := filepath.Join(dir, "app.ini")
	if err := os.WriteFile(conf, []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GITEA_WORK_DIR="+dir)
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--config", conf}, args...)...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gitea %s: %v\n%s", args[0], err, out)
		}
		return strings.TrimSpace(string(out))
	}
	cli("migrate")
	cli("admin", "user", "create", "--username", s.user, "--password", s.pass, "--email", "fdn@example.com", "--admin", "--must-change-password=false")
	lines := strings.Split(cli("admin", "user", "generate-access-token", "--username", s.user, "--scopes", "write:repository", "--raw"), "\n")
	s.token = lines[len(lines)-1]
	p := clustertest.StartProcess(t, dir, "gitea", bin, []string{"GITEA_WORK_DIR=" + dir}, "--config", conf, "web")
	p.AwaitReady(t, &http.Client{Timeout: 2 * time.Second}, s.url+"/api/v1/version", time.Minute)

	s.repo = forge.Repo{Owner: s.user, Name: "fleet"}
	s.api(t, http.MethodPost, "/user/repos", `{"name":"fleet","auto_init":true,"default_branch":"main"}`, nil)
	var branch struct{ Commit struct{ ID string } }
	s.api(t, http.MethodGet, "/repos/fdn/fleet/branches/main", "", &branch)
	if s.head = branch.Commit.ID; len(s.head) != 40 {
		t.Fatalf("the repository's commit: %q", s.head)
	}
	return s
}

func currentUser(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// api calls Gitea's API as the admin user (basic auth).
func (s *server) api(t *testing.T, method, path, body string, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+"/api/v1"+path, strings.NewReader(body))
	req.SetBasicAuth(s.user, s.pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

type status struct {
	Status, Context, Description string
	TargetURL                    string `json:"target_url"`
}

// statuses are the commit's latest status of each context (Gitea's
// combined status).
func (s *server) statuses(t *testing.T) []status { return s.statusesOf(t, s.head) }

func (s *server) statusesOf(t *testing.T, commit string) []status {
	t.Helper()
	var out struct{ Statuses []status }
	s.api(t, http.MethodGet, "/repos/fdn/fleet/commits/"+commit+"/status", "", &out)
	return out.Statuses
}

// commit adds a file to main and returns the commit it made.
func (s *server) commit(t *testing.T, name string) string {
	t.Helper()
	var out struct{ Commit struct{ SHA string } }
	s.api(t, http.MethodPost, "/repos/fdn/fleet/contents/"+name, `{"content":"aGVsbG8=","message":"Add `+name+`","branch":"main"}`, &out)
	return out.Commit.SHA
}

// newRig is the forge rig delivering to a real Gitea.
func newRig(t *testing.T) (*server, *forgetest.Rig) {
	t.Helper()
	g := startGitea(t)
	r := forgetest.NewRig(t, g.repo)
	f, err := gitea.New(gitea.Options{URL: g.url, TokenFile: forgetest.TokenFile(t, g.token), Now: r.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.Restart(f)
	return g, r
}

// TestCommitStatusPerCluster runs the dispatcher against a real Gitea: one
// status context per cluster, following the verdict; a commit the
// repository lacks is refused for good, not retried.
func TestCommitStatusPerCluster(t *testing.T) {
	g, r := newRig(t)
	r.Decide("prod", g.head, rollout.VerdictApplying, "1 of 3 expected layers applied it")
	r.FlushAll()
	r.Decide("staging", g.head, rollout.VerdictFailed, "flux-system/apps failed: HealthCheckFailed\n<b>x</b>")
	r.FlushAll()
	r.Decide("prod", g.head, rollout.VerdictApplied, "all 3 expected layers applied it")
	r.FlushAll()

	latest := map[string]status{}
	var contexts []string
	for _, s := range g.statuses(t) {
		latest[s.Context] = s
		contexts = append(contexts, s.Context)
	}
	slices.Sort(contexts)
	if !slices.Equal(contexts, []string{"flux-deploy/prod", "flux-deploy/staging"}) {
		t.Fatalf("contexts %v: want one per cluster", contexts)
	}
	if p := latest["flux-deploy/prod"]; p.Status != "success" || p.Description != "applied: all 3 expected layers applied it" ||
		p.TargetURL != "https://fdn.example.com/ui/prod/"+g.head {
		t.Errorf("prod: %+v", p)
	}
	if s := latest["flux-deploy/staging"]; s.Status != "failure" || s.Description != "failed: flux-system/apps failed: HealthCheckFailed <b>x</b>" {
		t.Errorf("staging: %+v", s)
	}

	missing := strings.Repeat("0", 40)
	r.Decide("prod", missing, rollout.VerdictApplied, "")
	r.FlushAll()
	if p := r.Record("prod", missing); !p.Dead || !strings.Contains(p.LastError, "object does not exist") {
		t.Fatalf("a commit the repository lacks: %+v, want dead-lettered with Gitea's message", p)
	}
}

// The commits merged between the source's previously applied commit and
// the one applied get its status, through Gitea's compare API.
func TestCommitsInsideALaterOne(t *testing.T) {
	g, r := newRig(t)
	c := []string{g.head, g.commit(t, "a"), g.commit(t, "b"), g.commit(t, "c")}
	for _, x := range []string{c[0], c[3]} {
		r.Decide("prod", x, rollout.VerdictApplied, "all 3 expected layers applied it")
		r.FlushAll()
	}
	for i, x := range c {
		want := "success applied: all 3 expected layers applied it"
		if i == 1 || i == 2 {
			want = "success went out in " + c[3][:7] + ", applied: all 3 expected layers applied it"
		}
		st := g.statusesOf(t, x)
		if len(st) != 1 || st[0].Context != "flux-deploy/prod" || st[0].Status+" "+st[0].Description != want {
			t.Errorf("commit %d: %+v, want %q", i, st, want)
		}
	}
}
