package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

// Artifacts serves tarballs over loopback HTTP, as source-controller's
// storage does.
type Artifacts struct {
	base  string
	mu    sync.Mutex
	files map[string][]byte
}

// ServeArtifacts listens on loopback until the test ends.
func ServeArtifacts(t testing.TB) *Artifacts {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &Artifacts{base: "http://" + ln.Addr().String(), files: map[string][]byte{}}
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

func (a *Artifacts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	b, ok := a.files[r.URL.Path]
	a.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(b)
}

func (a *Artifacts) put(p string, b []byte) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.files[p] = b
	return a.base + p
}

// Repo is a GitRepository whose commits the test publishes by writing its
// status, as source-controller would after fetching them; or, made by
// NewOCIRepo, an OCIRepository whose artifacts CI pushed from those
// commits (flux push artifact --revision main@sha1:<commit>).
type Repo struct {
	Namespace, Name string
	Kind            string // GitRepository or OCIRepository
	c               *clustertest.Cluster
	a               *Artifacts
	n               int
	published       map[string]map[string]string // files by commit hash
}

// NewRepo creates the GitRepository, without an artifact yet.
func NewRepo(t testing.TB, c *clustertest.Cluster, a *Artifacts, namespace, name string) *Repo {
	t.Helper()
	return newRepo(t, c, a, namespace, name, "GitRepository", "url: https://git.example.invalid/fleet.git\n  ref: {branch: main}")
}

// NewOCIRepo creates an OCIRepository following tag latest, without an
// artifact yet: each commit published is an artifact pushed from it.
func NewOCIRepo(t testing.TB, c *clustertest.Cluster, a *Artifacts, namespace, name string) *Repo {
	t.Helper()
	return newRepo(t, c, a, namespace, name, "OCIRepository", "url: oci://registry.example.invalid/fleet\n  ref: {tag: latest}")
}

func newRepo(t testing.TB, c *clustertest.Cluster, a *Artifacts, namespace, name, kind, spec string) *Repo {
	t.Helper()
	c.ApplyYAML(t, fmt.Sprintf("apiVersion: source.toolkit.fluxcd.io/v1\nkind: %s\nmetadata: {name: %s, namespace: %s}\nspec:\n  interval: 1h\n  %s\n",
		kind, name, namespace, spec))
	return &Repo{Namespace: namespace, Name: name, Kind: kind, c: c, a: a, published: map[string]map[string]string{}}
}

// Commit is a published commit.
type Commit struct {
	Hash     string // the git commit: 40 hex digits
	Revision string // what Flux applies: main@sha1:<hash>, or an OCI artifact's latest@sha256:<manifest digest>
}

// Publish makes files (path: content) the repository's new commit: a
// tarball served on loopback, and the GitRepository's status pointing at it
// with its digest. Publishing the same files again is a new commit that
// changes no manifests.
func (r *Repo) Publish(t testing.TB, files map[string]string) Commit {
	t.Helper()
	hash := r.NextHash(t, files)
	r.n++
	r.published[hash] = maps.Clone(files)
	return r.push(t, hash, tarball(t, files))
}

// NextHash is the hash of the commit Publish(files) would make next.
func (r *Repo) NextHash(t testing.TB, files map[string]string) string {
	t.Helper()
	sum := sha1.Sum(fmt.Appendf(nil, "%s/%s/%d/%x", r.Namespace, r.Name, r.n+1, sha256.Sum256(tarball(t, files))))
	return hex.EncodeToString(sum[:])
}

// Rebuild pushes commit c again as a new artifact (a CI re-run: the same
// files and origin revision under a new manifest digest), which Flux
// applies as a new revision; OCI only.
func (r *Repo) Rebuild(t testing.TB, c Commit) Commit {
	t.Helper()
	if r.Kind != "OCIRepository" {
		t.Fatal("only an OCI artifact is rebuilt")
	}
	r.n++
	return r.push(t, c.Hash, tarball(t, r.published[c.Hash]))
}

// push serves tgz as the source's artifact of commit hash and writes the
// source's status: a GitRepository's revision is the commit's, an
// OCIRepository's the manifest's digest, with the commit as its origin
// revision (the annotation flux push artifact writes).
func (r *Repo) push(t testing.TB, hash string, tgz []byte) Commit {
	t.Helper()
	c := Commit{Hash: hash, Revision: "main@sha1:" + hash}
	digest := sha256.Sum256(tgz)
	artifact := map[string]any{"digest": "sha256:" + hex.EncodeToString(digest[:]), "size": int64(len(tgz))}
	artifactPath := path.Join(strings.ToLower(r.Kind), r.Namespace, r.Name, hash+".tar.gz")
	if r.Kind == "OCIRepository" {
		manifest := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%x", hash, r.n, digest))
		c.Revision = "latest@sha256:" + hex.EncodeToString(manifest[:])
		artifactPath = path.Join(strings.ToLower(r.Kind), r.Namespace, r.Name, hex.EncodeToString(manifest[:])+".tar.gz")
		artifact["metadata"] = map[string]any{"org.opencontainers.image.revision": "main@sha1:" + hash}
	}
	artifact["path"], artifact["url"], artifact["revision"] = artifactPath, r.a.put("/"+artifactPath, tgz), c.Revision
	now := time.Now().UTC().Format(time.RFC3339)
	artifact["lastUpdateTime"] = now
	writeStatus(t, r.c, r.Kind, r.Namespace, r.Name, c.Revision, func(u map[string]any, gen int64) {
		ready := map[string]any{
			"type": "Ready", "status": "True", "reason": "Succeeded", "observedGeneration": gen,
			"message": "stored artifact for revision '" + c.Revision + "'", "lastTransitionTime": now,
		}
		stored := maps.Clone(ready)
		stored["type"] = "ArtifactInStorage"
		u["status"] = map[string]any{
			"observedGeneration": gen,
			"conditions":         []any{ready, stored},
			"artifact":           artifact,
		}
	})
	return c
}

// BuildChart does what source-controller does for the HelmChart that
// helm-controller makes of HelmRelease releaseNS/release, whose chart is
// the directory dir of this repository with reconcileStrategy Revision:
// once the HelmChart exists, it packages dir at commit c with the
// version of its Chart.yaml plus "+<the first 12 hex of the commit>",
// serves it, and writes the HelmChart's status.
func (r *Repo) BuildChart(t testing.TB, releaseNS, release, dir string, c Commit) {
	t.Helper()
	name := releaseNS + "-" + release // helm-controller's name for it
	ri, err := r.c.ResourceFor("source.toolkit.fluxcd.io/v1", "HelmChart", r.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := ri.Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("helm-controller made no HelmChart %s/%s within 2m: %v", r.Namespace, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	files := map[string]string{}
	var version string
	for p, body := range r.published[c.Hash] {
		rel, ok := strings.CutPrefix(p, dir+"/")
		if !ok {
			continue
		}
		if rel == "Chart.yaml" {
			for line := range strings.SplitSeq(body, "\n") {
				if v, ok := strings.CutPrefix(line, "version: "); ok {
					version = strings.TrimSpace(v) + "+" + c.Hash[:12]
					body = strings.Replace(body, line, "version: "+version, 1)
				}
			}
		}
		files[path.Base(dir)+"/"+rel] = body
	}
	if version == "" {
		t.Fatalf("no Chart.yaml with a version under %s at %s", dir, c.Hash[:7])
	}
	tgz := tarball(t, files)
	digest := sha256.Sum256(tgz)
	artifactPath := path.Join("helmchart", r.Namespace, name, path.Base(dir)+"-"+version+".tgz")
	url := r.a.put("/"+artifactPath, tgz)
	writeStatus(t, r.c, "HelmChart", r.Namespace, name, version, func(u map[string]any, gen int64) {
		now := time.Now().UTC().Format(time.RFC3339)
		ready := map[string]any{
			"type": "Ready", "status": "True", "reason": "ChartPackageSucceeded", "observedGeneration": gen,
			"message": "packaged '" + path.Base(dir) + "' chart with version '" + version + "'", "lastTransitionTime": now,
		}
		u["status"] = map[string]any{
			"observedGeneration": gen, "observedSourceArtifactRevision": c.Revision, "observedChartName": path.Base(dir),
			"conditions": []any{ready},
			"artifact": map[string]any{
				"path": artifactPath, "url": url, "revision": version,
				"digest": "sha256:" + hex.EncodeToString(digest[:]), "size": int64(len(tgz)), "lastUpdateTime": now,
			},
		}
	})
}

// Chart is an OCIRepository holding a Helm chart, whose versions the test
// publishes by writing its status, as source-controller would after
// pulling them: a HelmRelease reads it through chartRef.
type Chart struct {
	Namespace, Name string
	c               *clustertest.Cluster
	a               *Artifacts
}

// NewChart creates the OCIRepository, without an artifact yet.
func NewChart(t testing.TB, c *clustertest.Cluster, a *Artifacts, namespace, name string) *Chart {
	t.Helper()
	c.ApplyYAML(t, fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: %s, namespace: %s}
spec:
  interval: 1h
  url: oci://registry.example.invalid/charts/%s
  ref: {tag: "1.0.0"}
  layerSelector: {mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip, operation: copy}
`, name, namespace, name))
	return &Chart{Namespace: namespace, Name: name, c: c, a: a}
}

// Publish makes a chart of version whose templates are files (name:
// content, under templates/) the repository's artifact: the chart's .tgz
// served on loopback, its revision <version>@sha256:<digest>, the tag
// equal to the version (helm-controller takes the chart's version from
// it). It returns the revision.
func (ch *Chart) Publish(t testing.TB, version string, templates map[string]string) string {
	t.Helper()
	files := map[string]string{ch.Name + "/Chart.yaml": "apiVersion: v2\nname: " + ch.Name + "\nversion: " + version + "\n"}
	for n, body := range templates {
		files[ch.Name+"/templates/"+n] = body
	}
	tgz := tarball(t, files)
	digest := sha256.Sum256(tgz)
	hexDigest := hex.EncodeToString(digest[:])
	rev := version + "@sha256:" + hexDigest
	artifactPath := path.Join("ocirepository", ch.Namespace, ch.Name, hexDigest+".tgz")
	url := ch.a.put("/"+artifactPath, tgz)
	status := func(gen int64) map[string]any {
		now := time.Now().UTC().Format(time.RFC3339)
		ready := map[string]any{
			"type": "Ready", "status": "True", "reason": "Succeeded", "observedGeneration": gen,
			"message": "stored artifact for digest '" + rev + "'", "lastTransitionTime": now,
		}
		return map[string]any{
			"observedGeneration": gen,
			"conditions":         []any{ready},
			"url":                "oci://registry.example.invalid/charts/" + ch.Name,
			"artifact": map[string]any{
				"path": artifactPath, "url": url, "revision": rev,
				"digest": "sha256:" + hexDigest, "size": int64(len(tgz)), "lastUpdateTime": now,
			},
		}
	}
	writeStatus(t, ch.c, "OCIRepository", ch.Namespace, ch.Name, rev, func(u map[string]any, gen int64) {
		spec, _ := u["spec"].(map[string]any)
		spec["ref"] = map[string]any{"tag": version}
		u["status"] = status(gen)
	})
	return rev
}

// writeStatus rewrites a source's spec and status (update), retrying on
// conflicts.
func writeStatus(t testing.TB, c *clustertest.Cluster, kind, namespace, name, what string, set func(u map[string]any, gen int64)) {
	t.Helper()
	ctx := context.Background()
	ri, err := c.ResourceFor("source.toolkit.fluxcd.io/v1", kind, namespace)
	if err != nil {
		t.Fatal(err)
	}
	for {
		u, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		set(u.Object, u.GetGeneration())
		// The spec first (it may move the generation), then the status
		// for the generation it made.
		if u, err = ri.Update(ctx, u, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			t.Fatalf("publish %s: %v", what, err)
		}
		set(u.Object, u.GetGeneration())
		_, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatalf("publish %s: %v", what, err)
		}
		return
	}
}

// tarball is a gzipped tar of files, with their directories, in a stable
// order.
func tarball(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	dirs := map[string]bool{}
	mod := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range names {
		for d := path.Dir(n); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	ds := make([]string, 0, len(dirs))
	for d := range dirs {
		ds = append(ds, d)
	}
	// Parents first.
	slices.SortFunc(ds, func(a, b string) int {
		if d := strings.Count(a, "/") - strings.Count(b, "/"); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	for _, d := range ds {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mod}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		b := []byte(files[n])
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(b)), ModTime: mod}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
