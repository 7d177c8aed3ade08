package flux

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const (
	sha1Hex   = "731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	sha256Hex = "4ea5c1e1a1b4d0b6f0ec1b7d0e5f5d0e7d8f6c3b2a1908f7e6d5c4b3a2918070"
)

func TestParseRevision(t *testing.T) {
	tests := []struct {
		in      string
		want    Revision
		wantErr string
	}{
		{in: "main@sha1:" + sha1Hex, want: Revision{"main", "sha1", sha1Hex}},
		{in: "feature/x@sha1:" + sha1Hex, want: Revision{"feature/x", "sha1", sha1Hex}},
		{in: "refs/heads/main@sha1:" + sha1Hex, want: Revision{"refs/heads/main", "sha1", sha1Hex}},
		{in: "v1.0.0@sha1:" + sha1Hex, want: Revision{"v1.0.0", "sha1", sha1Hex}},
		{in: "sha1:" + sha1Hex, want: Revision{"", "sha1", sha1Hex}},
		{in: "latest@sha256:" + sha256Hex, want: Revision{"latest", "sha256", sha256Hex}},
		{in: "sha256:" + sha256Hex, want: Revision{"", "sha256", sha256Hex}},
		{in: "main@sha1:" + strings.ToUpper(sha1Hex), want: Revision{"main", "sha1", sha1Hex}},
		{in: "user@corp@sha1:" + sha1Hex, want: Revision{"user@corp", "sha1", sha1Hex}},
		// Legacy forms from before Flux 2.0.
		{in: "main/" + sha1Hex, want: Revision{"main", "sha1", sha1Hex}},
		{in: "HEAD/" + sha1Hex, want: Revision{"HEAD", "sha1", sha1Hex}},
		{in: "feature/x/" + sha1Hex, want: Revision{"feature/x", "sha1", sha1Hex}},
		{in: "6.1.6/" + sha256Hex, want: Revision{"6.1.6", "sha256", sha256Hex}},
		{in: sha1Hex, want: Revision{"", "sha1", sha1Hex}},
		{in: sha256Hex, want: Revision{"", "sha256", sha256Hex}},

		{in: "", wantErr: "empty"},
		{in: "main", wantErr: "is not"},
		{in: "main@sha1:" + sha1Hex[:39], wantErr: "39 hex digits"},
		{in: "main@sha1:" + sha256Hex, wantErr: "64 hex digits, want 40"},
		{in: "main@md5:" + sha1Hex[:32], wantErr: "unknown digest algorithm"},
		{in: "main@sha1:" + sha1Hex[:39] + "g", wantErr: "not hex"},
		{in: "main@" + sha1Hex, wantErr: "lacks"},
		{in: "@sha1:" + sha1Hex, wantErr: "empty ref"},
		{in: "/" + sha1Hex, wantErr: "empty ref"},
		{in: "main/" + sha1Hex[:12], wantErr: "is not"},
		{in: strings.Repeat("a", 2000), wantErr: "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRevision(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrRevision) {
					t.Fatalf("ParseRevision(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRevision(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseRevision(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestRevisionStringIsCurrentForm(t *testing.T) {
	for in, want := range map[string]string{
		"main/" + sha1Hex:              "main@sha1:" + sha1Hex,
		"main@sha1:" + sha1Hex:         "main@sha1:" + sha1Hex,
		"sha256:" + sha256Hex:          "sha256:" + sha256Hex,
		sha1Hex:                        "sha1:" + sha1Hex,
		"latest@sha256:" + sha256Hex:   "latest@sha256:" + sha256Hex,
		"refs/heads/x@sha1:" + sha1Hex: "refs/heads/x@sha1:" + sha1Hex,
	} {
		r, err := ParseRevision(in)
		if err != nil {
			t.Fatal(err)
		}
		if r.String() != want {
			t.Errorf("ParseRevision(%q).String() = %q, want %q", in, r.String(), want)
		}
	}
}

func TestParseQuery(t *testing.T) {
	tests := []struct {
		in         string
		hash       string
		prefix, ok bool
	}{
		{"main@sha1:" + sha1Hex, sha1Hex, false, true},
		{sha1Hex, sha1Hex, false, true},
		{strings.ToUpper(sha256Hex), sha256Hex, false, true},
		{"731f7ea", "731f7ea", true, true},
		{sha1Hex + "12", sha1Hex + "12", true, true}, // a prefix of a sha256
		{"731f7e", "", false, false},                 // too short
		{"xyz", "", false, false},
		{"", "", false, false},
	}
	for _, tt := range tests {
		hash, prefix, err := ParseQuery(tt.in)
		if (err == nil) != tt.ok || hash != tt.hash || prefix != tt.prefix {
			t.Errorf("ParseQuery(%q) = %q, %v, %v; want %q, %v, ok=%v", tt.in, hash, prefix, err, tt.hash, tt.prefix, tt.ok)
		}
	}
}

func TestParsePruneMessage(t *testing.T) {
	const vap = `configmaps "app-protected" is forbidden: ValidatingAdmissionPolicy 'acc-protect-configmaps' with binding 'acc-protect-configmaps' denied request: ConfigMaps labelled protect=true may not be deleted`
	tests := []struct {
		name string
		msg  string
		want []PruneObject
	}{
		{
			name: "captured from kustomize-controller v1.9.6",
			msg:  "delete failed, errors: ConfigMap/acc-apps/app-protected delete failed: " + vap + ";",
			want: []PruneObject{{Kind: "ConfigMap", Namespace: "acc-apps", Name: "app-protected", Error: vap}},
		},
		{
			name: "several objects, one cluster-scoped, one query failure",
			msg: "delete failed, errors: Namespace/old-team delete failed: namespaces \"old-team\" is forbidden: denied;" +
				"Secret/apps/db-creds delete failed: Internal error occurred: etcdserver: request timed out;" +
				"ConfigMap/apps/x query failed: Get \"https://10.0.0.1/api/v1/namespaces/apps/configmaps/x\": dial tcp: i/o timeout;",
			want: []PruneObject{
				{Kind: "Namespace", Name: "old-team", Error: `namespaces "old-team" is forbidden: denied`},
				{Kind: "Secret", Namespace: "apps", Name: "db-creds", Error: "Internal error occurred: etcdserver: request timed out"},
				{Kind: "ConfigMap", Namespace: "apps", Name: "x", Error: `Get "https://10.0.0.1/api/v1/namespaces/apps/configmaps/x": dial tcp: i/o timeout`},
			},
		},
		{
			name: "error text with a semicolon and a newline",
			msg:  "delete failed, errors: ClusterRole/viewer delete failed: admission webhook \"x\" denied: a; b\nc;",
			want: []PruneObject{{Kind: "ClusterRole", Name: "viewer", Error: "admission webhook \"x\" denied: a; b\nc"}},
		},
		{
			name: "no trailing semicolon",
			msg:  "delete failed, errors: ConfigMap/apps/old delete failed: gone wrong",
			want: []PruneObject{{Kind: "ConfigMap", Namespace: "apps", Name: "old", Error: "gone wrong"}},
		},
		{name: "not a prune message", msg: "health check failed after 30s: timeout", want: nil},
		{name: "prefix without objects", msg: "delete failed, errors: something odd", want: nil},
		{name: "empty", msg: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParsePruneMessage(tt.msg)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParsePruneMessage:\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	base := `"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps"},"severity":"info","timestamp":"2026-08-07T10:15:30Z","reason":"Progressing","message":"x"`
	tests := []struct {
		name      string
		body      string
		wantField string
		check     func(t *testing.T, d Decoded)
	}{
		{
			name: "v1beta1 from notification-controller",
			body: `{` + base + `,"metadata":{"revision":"main@sha1:` + sha1Hex + `","cluster":"prod"},"reportingController":"kustomize-controller"}`,
			check: func(t *testing.T, d Decoded) {
				if d.Rev.Hash != sha1Hex || d.Cluster != "prod" || d.At.Format("15:04:05") != "10:15:30" {
					t.Fatalf("decoded %+v", d)
				}
			},
		},
		{
			name: "prefixed metadata key and legacy revision",
			body: `{` + base + `,"metadata":{"kustomize.toolkit.fluxcd.io/revision":"main/` + sha1Hex + `"}}`,
			check: func(t *testing.T, d Decoded) {
				if d.Rev.Hash != sha1Hex || d.Rev.Ref != "main" {
					t.Fatalf("decoded %+v", d.Rev)
				}
			},
		},
		{
			name: "event/v1 shape with action, relatedObject and unknown fields",
			body: `{` + base + `,"action":"Applied","relatedObject":{"kind":"GitRepository","namespace":"flux-system","name":"fleet"},"future":{"x":1},"metadata":{"revision":"main@sha1:` + sha1Hex + `"}}`,
			check: func(t *testing.T, d Decoded) {
				if d.Action != "Applied" || d.RelatedObject == nil || d.RelatedObject.Name != "fleet" {
					t.Fatalf("decoded %+v", d.Event)
				}
			},
		},
		{
			name: "OCI origin revision",
			body: `{` + base + `,"metadata":{"revision":"latest@sha256:` + sha256Hex + `","originRevision":"main@sha1:` + sha1Hex + `"}}`,
			check: func(t *testing.T, d Decoded) {
				if d.Rev.Hash != sha256Hex || d.OriginRev.Hash != sha1Hex {
					t.Fatalf("decoded %+v %+v", d.Rev, d.OriginRev)
				}
			},
		},
		{
			name: "source event without revision is valid",
			body: `{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"x"},"severity":"error","timestamp":"2026-08-07T10:15:30Z","reason":"GitOperationFailed","message":"auth"}`,
		},
		{
			name: "a release's chart built from a commit names it",
			body: `{"involvedObject":{"kind":"HelmRelease","namespace":"apps","name":"web"},"severity":"info","timestamp":"2026-08-07T10:15:30Z","reason":"UpgradeSucceeded","message":"x","metadata":{"revision":"1.0.0+` + sha1Hex[:12] + `","token":"ab"}}`,
			check: func(t *testing.T, d Decoded) {
				if d.Commit != sha1Hex[:12] || d.Revision != "1.0.0+"+sha1Hex[:12] || d.Rev.Hash != "" {
					t.Fatalf("decoded commit %q, revision %q", d.Commit, d.Revision)
				}
			},
		},
		{
			name: "a release's commit annotation wins over its chart's version",
			body: `{"involvedObject":{"kind":"HelmRelease","namespace":"apps","name":"web"},"severity":"info","timestamp":"2026-08-07T10:15:30Z","reason":"UpgradeSucceeded","message":"x","metadata":{"revision":"1.0.0+ba5715194a63","event.toolkit.fluxcd.io/commit":"main@sha1:` + strings.ToUpper(sha1Hex) + `"}}`,
			check: func(t *testing.T, d Decoded) {
				if d.Commit != sha1Hex {
					t.Fatalf("decoded commit %q", d.Commit)
				}
			},
		},
		{
			name: "an OCI chart's version names its digest, no commit",
			body: `{"involvedObject":{"kind":"HelmRelease","namespace":"apps","name":"web"},"severity":"info","timestamp":"2026-08-07T10:15:30Z","reason":"UpgradeSucceeded","message":"x","metadata":{"revision":"1.0.0+ba5715194a63","oci-digest":"sha256:ba5715194a63"}}`,
			check: func(t *testing.T, d Decoded) {
				if d.Commit != "" {
					t.Fatalf("decoded commit %q", d.Commit)
				}
			},
		},
		{
			name: "a release's version without build metadata names no commit",
			body: `{"involvedObject":{"kind":"HelmRelease","namespace":"apps","name":"web"},"severity":"info","timestamp":"2026-08-07T10:15:30Z","reason":"UpgradeSucceeded","message":"x","metadata":{"revision":"1.0.0+build.7","commit":"not-a-commit"}}`,
			check: func(t *testing.T, d Decoded) {
				if d.Commit != "" {
					t.Fatalf("decoded commit %q", d.Commit)
				}
			},
		},
		{name: "not JSON", body: `{"involvedObject":`, wantField: "body"},
		{name: "JSON array", body: `[]`, wantField: "body"},
		{name: "missing kind", body: `{"involvedObject":{"namespace":"a","name":"b"},"timestamp":"2026-08-07T10:15:30Z"}`, wantField: "involvedObject.kind"},
		{name: "missing namespace", body: `{"involvedObject":{"kind":"Kustomization","name":"b"},"timestamp":"2026-08-07T10:15:30Z"}`, wantField: "involvedObject.namespace"},
		{name: "missing name", body: `{"involvedObject":{"kind":"Kustomization","namespace":"a"},"timestamp":"2026-08-07T10:15:30Z"}`, wantField: "involvedObject.name"},
		{name: "name with slash", body: `{"involvedObject":{"kind":"Kustomization","namespace":"a","name":"b/c"},"timestamp":"2026-08-07T10:15:30Z"}`, wantField: "involvedObject.name"},
		{name: "name with NUL", body: `{"involvedObject":{"kind":"Kustomization","namespace":"a","name":"b\u0000"},"timestamp":"2026-08-07T10:15:30Z"}`, wantField: "involvedObject.name"},
		{name: "Kustomization without revision", body: `{` + base + `}`, wantField: "metadata.revision"},
		{name: "bad revision", body: `{` + base + `,"metadata":{"revision":"main@sha1:zz"}}`, wantField: "metadata.revision"},
		{name: "bad origin revision", body: `{` + base + `,"metadata":{"revision":"main@sha1:` + sha1Hex + `","originRevision":"nope"}}`, wantField: "metadata.originRevision"},
		{name: "bad cluster", body: `{` + base + `,"metadata":{"revision":"main@sha1:` + sha1Hex + `","cluster":"a b"}}`, wantField: "metadata.cluster"},
		{name: "missing timestamp", body: `{"involvedObject":{"kind":"Kustomization","namespace":"a","name":"b"},"metadata":{"revision":"main@sha1:` + sha1Hex + `"}}`, wantField: "timestamp"},
		{name: "bad timestamp", body: `{"involvedObject":{"kind":"Kustomization","namespace":"a","name":"b"},"timestamp":"yesterday","metadata":{"revision":"main@sha1:` + sha1Hex + `"}}`, wantField: "timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decode([]byte(tt.body))
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Fatalf("Decode error = %v, want a FieldError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

func TestCommitSubject(t *testing.T) {
	if got := CommitSubject("NewArtifact", "stored artifact for commit 'Merge pull request #42 from x/it's-done'"); got != "Merge pull request #42 from x/it's-done" {
		t.Fatalf("subject %q", got)
	}
	if got := CommitSubject("Progressing", "stored artifact for commit 'x'"); got != "" {
		t.Fatalf("subject from another reason: %q", got)
	}
}

func FuzzParseRevision(f *testing.F) {
	for _, s := range []string{"main@sha1:" + sha1Hex, "main/" + sha1Hex, "sha256:" + sha256Hex, "a@b@sha1:" + sha1Hex, sha1Hex, "@:", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRevision(s)
		if err != nil {
			return
		}
		if !IsHex(r.Hash) || r.Hash != strings.ToLower(r.Hash) || len(r.Hash) != hexLen[r.Algo] {
			t.Fatalf("ParseRevision(%q) = %+v: bad hash", s, r)
		}
		again, err := ParseRevision(r.String())
		if err != nil || again != r {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", s, again, err, r)
		}
	})
}

func FuzzParsePruneMessage(f *testing.F) {
	f.Add("delete failed, errors: ConfigMap/acc-apps/app-protected delete failed: configmaps \"x\" is forbidden;")
	f.Add("delete failed, errors: Namespace/x delete failed: a;Secret/a/b query failed: b;")
	f.Add("delete failed, errors: ;;;")
	f.Fuzz(func(t *testing.T, msg string) {
		for _, o := range ParsePruneMessage(msg) {
			if o.Kind == "" || o.Name == "" || strings.ContainsAny(o.Name, "/; \t\n") || strings.ContainsAny(o.Namespace, "/; \t\n") {
				t.Fatalf("ParsePruneMessage(%q) gave object %+v", msg, o)
			}
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps"},"severity":"info","timestamp":"2026-08-07T10:15:30Z","message":"m","reason":"Progressing","metadata":{"revision":"main@sha1:` + sha1Hex + `"}}`))
	f.Add([]byte(`{"involvedObject":{"kind":"GitRepository","namespace":"a","name":"b"},"timestamp":"2026-08-07T10:15:30Z","metadata":{"kustomize.toolkit.fluxcd.io/revision":"x"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := Decode(body)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("Decode error %v is not a FieldError naming a field", err)
			}
			return
		}
		o := d.InvolvedObject
		if o.Kind == "" || o.Name == "" || o.Namespace == "" || d.At.IsZero() {
			t.Fatalf("Decode accepted %q without its required fields", body)
		}
		if o.Kind == KindKustomization && d.Rev.Hash == "" {
			t.Fatalf("Decode accepted a Kustomization event without revision: %q", body)
		}
	})
}
