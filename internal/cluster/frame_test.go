package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
)

// frames reads every frame of stream through client-go's streaming
// decoder (a buffer of 16 bytes to start: frames longer than it come in
// parts), as a watch does, with framer f.
func frames(t *testing.T, f interface {
	NewFrameReader(io.ReadCloser) io.ReadCloser
}, stream io.Reader) ([]string, error) {
	t.Helper()
	var got []string
	collect := collector{got: &got}
	d := streaming.NewDecoder(f.NewFrameReader(io.NopCloser(stream)), collect)
	for {
		if _, _, err := d.Decode(nil, nil); err != nil {
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			return got, err
		}
	}
}

// collector is a decoder that keeps each frame it is given.
type collector struct{ got *[]string }

func (c collector) Decode(data []byte, _ *schema.GroupVersionKind, _ runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	*c.got = append(*c.got, string(data))
	return nil, nil, nil
}

// TestFrameReader: the frames of a watch stream are client-go's JSON
// framer's, byte for byte, whatever its reads deliver at a time (the
// whole stream, one byte, half a buffer): strings holding braces,
// brackets, escaped quotes and backslashes, white space between frames, a
// frame many times the decoder's first buffer. A stream that ends inside
// a frame, or holds no object where one should begin, is an error.
func TestFrameReader(t *testing.T) {
	u := helmRelease("True", "UpgradeSucceeded", 4)
	big, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	events := []string{
		`{"type":"ADDED","object":{"kind":"HelmRelease","metadata":{"name":"a"}}}`,
		`{"type":"MODIFIED","object":{"a":"}{][","b":"\"}","c":"\\","d":["{",{"e":"\\\"}"}],"f":"\u007d"}}`,
		`{"type":"MODIFIED","object":` + string(big) + `}`,
		`{"type":"BOOKMARK","object":{"kind":"HelmRelease","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}`,
	}
	stream := strings.Join(events, "\n") + "\n \r\n\t"
	want, err := frames(t, jsonserializer.Framer, strings.NewReader(stream))
	if err != nil || len(want) != len(events) {
		t.Fatalf("client-go's framer: %d frames (%v): the case tests nothing", len(want), err)
	}
	for name, r := range map[string]func() io.Reader{
		"whole":    func() io.Reader { return strings.NewReader(stream) },
		"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(stream)) },
		"halves":   func() io.Reader { return iotest.HalfReader(strings.NewReader(stream)) },
	} {
		got, err := frames(t, framer{}, r())
		if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("%s: frames %q (%v), want %q", name, got, err, want)
		}
	}
	for name, bad := range map[string]string{
		"ends inside a frame":   events[0] + "\n" + events[1][:30],
		"a value not an object": events[0] + "\n" + `"x"`,
	} {
		if got, err := frames(t, framer{}, strings.NewReader(bad)); err == nil || len(got) != 1 {
			t.Fatalf("%s: frames %q, no error", name, got)
		}
	}
}

// TestSplitEvent: a watch event as the API server writes it is split into
// its type and object as encoding/json decodes it; any other shape is
// left to encoding/json.
func TestSplitEvent(t *testing.T) {
	for _, tt := range []struct {
		data  string
		split bool
	}{
		{`{"type":"ADDED","object":{"kind":"HelmRelease","metadata":{"name":"a","annotations":{"x":"}\"{"}}}}`, true},
		{`{"type":"ERROR","object":{"kind":"Status","code":410}} `, true},
		{`{"object":{"kind":"HelmRelease"},"type":"ADDED"}`, false},
		{`{"type":"ADDED","object":{"kind":"HelmRelease"},"more":{}}`, false},
		{`{"type":"AD\"DED","object":{"kind":"HelmRelease"}}`, false},
		{`{"type":"ADDED","object":null}`, false},
		{"{\"type\":\"\xc8\",\"object\":{}}", false}, // encoding/json decodes it as U+FFFD
		{`{"type":"","object":{}}`, false},
	} {
		var ev metav1.WatchEvent
		if splitEvent([]byte(tt.data), &ev) != tt.split {
			t.Fatalf("%s: split %v, want %v", tt.data, !tt.split, tt.split)
		}
		if !tt.split {
			continue
		}
		var want metav1.WatchEvent
		if err := json.Unmarshal([]byte(tt.data), &want); err != nil {
			t.Fatal(err)
		}
		if ev.Type != want.Type || !bytes.Equal(ev.Object.Raw, want.Object.Raw) {
			t.Fatalf("%s: split into %s %s, want %s %s", tt.data, ev.Type, ev.Object.Raw, want.Type, want.Object.Raw)
		}
	}
}

// BenchmarkWatchEvent: a watch stream of HelmReleases as helm-controller
// leaves them, each event framed and its envelope opened to its object,
// by client-go's JSON framer and encoding/json, and by the reader's.
func BenchmarkWatchEvent(b *testing.B) {
	obj, err := json.Marshal(helmRelease("True", "UpgradeSucceeded", 4).Object)
	if err != nil {
		b.Fatal(err)
	}
	event := []byte(`{"type":"MODIFIED","object":` + string(obj) + "}\n")
	const events = 100
	stream := bytes.Repeat(event, events)
	for _, tt := range []struct {
		name  string
		frame interface {
			NewFrameReader(io.ReadCloser) io.ReadCloser
		}
		open func([]byte, *metav1.WatchEvent) error
	}{
		{"client-go", jsonserializer.Framer, func(data []byte, ev *metav1.WatchEvent) error { return json.Unmarshal(data, ev) }},
		{"reader", framer{}, func(data []byte, ev *metav1.WatchEvent) error {
			_, _, err := wireCodec{kind: releaseKind()}.Decode(data, nil, ev)
			return err
		}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			buf := make([]byte, 64<<10)
			for b.Loop() {
				r := tt.frame.NewFrameReader(io.NopCloser(bytes.NewReader(stream)))
				for range events {
					n, err := r.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					var ev metav1.WatchEvent
					if err := tt.open(buf[:n], &ev); err != nil || len(ev.Object.Raw) != len(obj) {
						b.Fatalf("opened %d bytes (%v)", len(ev.Object.Raw), err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

// FuzzWatchStream: whatever a stream holds, the reader's framer yields
// the objects client-go's JSON framer yields of it, in order, as far as
// that one reads it (it checks validity, the reader's framer leaves that
// to the decoding); and an event split by splitEvent is what
// encoding/json decodes of it.
func FuzzWatchStream(f *testing.F) {
	for _, seed := range []string{
		`{"type":"ADDED","object":{"kind":"HelmRelease","metadata":{"name":"a"}}}` + "\n" + `{"type":"DELETED","object":{}}`,
		`{"type":"MODIFIED","object":{"a":"}{][","b":"\"}","c":"\\","d":["{",{"e":"\\\"}"}]}}`,
		`{"type":"ADDED","object":{"kind":"x"},"more":1}`,
		`{}{} [] "x" {"a":[1,2,{"b":null}]}`,
		`{"a":"\u00e9\ud83d\ude00"}` + " \r\n\t" + `{"type":"E\"","object":{}}`,
		`{"unterminated":"}`,
		"{\"type\":\"\xc8\",\"object\":{}}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev metav1.WatchEvent
		if splitEvent(data, &ev) && json.Valid(data) {
			var want metav1.WatchEvent
			if err := json.Unmarshal(data, &want); err != nil || ev.Type != want.Type || !bytes.Equal(ev.Object.Raw, want.Object.Raw) {
				t.Fatalf("%q split into %s %s; encoding/json: %s %s (%v)", data, ev.Type, ev.Object.Raw, want.Type, want.Object.Raw, err)
			}
		}
		want, _ := frames(t, jsonserializer.Framer, bytes.NewReader(data))
		for i, w := range want {
			if !strings.HasPrefix(w, "{") {
				want = want[:i] // the reader's framer takes objects alone
				break
			}
		}
		got, _ := frames(t, framer{}, iotest.HalfReader(bytes.NewReader(data)))
		if len(got) < len(want) || strings.Join(got[:len(want)], "|") != strings.Join(want, "|") {
			t.Fatalf("%q framed as %q, client-go's framer %q", data, got, want)
		}
	})
}
