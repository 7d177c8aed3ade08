package flux

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fixture"
)

// sameAsJSON fails t unless Decode gives what encoding/json and validate
// give for body (the value and the error), and reports whether decodePlain
// took it.
func sameAsJSON(t *testing.T, body []byte) (plain bool) {
	t.Helper()
	var want Decoded
	wantErr := json.Unmarshal(body, &want.Event)
	var ev Event
	if plain = decodePlain(body, &ev); plain {
		if wantErr != nil {
			t.Fatalf("decodePlain accepted %q, encoding/json refuses it: %v", body, wantErr)
		}
		if !reflect.DeepEqual(ev, want.Event) {
			t.Fatalf("decodePlain(%q):\n got %#v\nwant %#v", body, ev, want.Event)
		}
	}
	if wantErr == nil {
		wantErr = want.validate()
	}
	got, err := Decode(body)
	if wantErr != nil {
		if err == nil {
			t.Fatalf("Decode(%q) accepted what encoding/json and validate refuse: %v", body, wantErr)
		}
		return plain
	}
	if err != nil {
		t.Fatalf("Decode(%q): %v, encoding/json and validate accept it", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%q):\n got %#v\nwant %#v", body, got, want)
	}
	return plain
}

// plainCases are bodies decodePlain takes (true) or leaves to encoding/json.
var plainCases = []struct {
	name  string
	body  string
	plain bool
}{
	{"as Flux sends it", `{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps","uid":"u","apiVersion":"kustomize.toolkit.fluxcd.io/v1","resourceVersion":"300"},"severity":"info","timestamp":"2026-11-30T12:43:08Z","message":"m","reason":"Progressing","metadata":{"revision":"main@sha1:` + sha1Hex + `"},"reportingController":"kustomize-controller","reportingInstance":"vm"}`, true},
	{"white space", " {\t\"involvedObject\" :\n{ \"kind\" : \"GitRepository\" ,\"namespace\":\"a\",\"name\":\"b\" } ,\r\n\"timestamp\":\"2026-11-30T12:43:08Z\" } \n", true},
	{"v1 shape", `{"involvedObject":{"kind":"GitRepository","namespace":"a","name":"b"},"action":"x","relatedObject":{"kind":"k","namespace":"n","name":"r","fieldPath":"f"},"timestamp":"2026-11-30T12:43:08Z"}`, true},
	{"unknown values of every kind", `{"a":-0,"b":1.5e+3,"c":0.1E-2,"d":[true,false,null,[],{}],"e":{"x":{"y":[1,"z"]}},"f":"s","involvedObject":{"kind":"Bucket","namespace":"a","name":"b","g":12},"timestamp":"2026-11-30T12:43:08Z"}`, true},
	{"escapes", `{"message":"a\nb\"c\\\/\u00e9\ud83d\ude00\b\f\r\t","reason":"x"}`, true},
	{"lone surrogate", `{"message":"\ud800x"}`, true},
	{"high surrogate, then text", `{"message":"\ud83dXude00"}`, true},
	{"two high surrogates", `{"message":"\ud83d\ud83d\ude00"}`, true},
	{"low surrogate first", `{"message":"\ude00\ud83d"}`, true},
	{"invalid UTF-8", "{\"message\":\"a\xffb\"}", true},
	{"UTF-8", `{"message":"déployé ✓"}`, true},
	{"repeated metadata key", `{"metadata":{"revision":"a","revision":"b","cluster":"c"}}`, true},
	{"repeated metadata", `{"metadata":{"revision":"a","cluster":"c"},"metadata":{"revision":"b"}}`, true},
	{"repeated relatedObject", `{"relatedObject":{"kind":"a","name":"n"},"relatedObject":{"kind":"b"}}`, true},
	{"empty objects", `{"metadata":{},"involvedObject":{}}`, true},
	{"empty", `{}`, true},
	{"nested ten deep", `{"x":` + strings.Repeat("[", 10) + strings.Repeat("]", 10) + `}`, true},

	{"field in another case", `{"Reason":"x"}`, false},
	{"object field in another case", `{"involvedObject":{"KIND":"x"}}`, false},
	{"key above ASCII", `{"reaſon":"x"}`, false},
	{"Kelvin sign", `{"involvedObject":{"\u212aind":"x"}}`, false},
	{"escaped key", `{"re\u0061son":"x"}`, false},
	{"repeated field", `{"reason":"x","reason":"y"}`, true},
	{"repeated object", `{"involvedObject":{"kind":"a"},"involvedObject":{"name":"b"}}`, true},
	{"repeated object field", `{"involvedObject":{"kind":"a","kind":"b"}}`, true},
	{"null field", `{"message":null}`, false},
	{"null metadata", `{"metadata":null}`, false},
	{"null metadata value", `{"metadata":{"revision":null}}`, false},
	{"null relatedObject", `{"relatedObject":null}`, false},
	{"number for a string", `{"message":1}`, false},
	{"string for an object", `{"involvedObject":"x"}`, false},
	{"trailing garbage", `{}x`, false},
	{"two objects", `{}{}`, false},
	{"array", `[]`, false},
	{"null", `null`, false},
	{"nothing", ``, false},
	{"leading zero", `{"x":01}`, false},
	{"bare dot", `{"x":1.}`, false},
	{"leading dot", `{"x":.5}`, false},
	{"minus alone", `{"x":-}`, false},
	{"empty exponent", `{"x":1e}`, false},
	{"plus", `{"x":+1}`, false},
	{"truncated literal", `{"x":tru}`, false},
	{"too deep to skip", `{"x":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`, false},
	{"objects too deep to skip", `{"x":` + strings.Repeat(`{"a":`, 65) + `1` + strings.Repeat("}", 65) + `}`, false},
	{"unterminated string", `{"message":"abc`, false},
	{"control character", "{\"message\":\"a\x01b\"}", false},
	{"last control character", "{\"message\":\"a\x1fb\"}", false},
	{"bad escape", `{"message":"\x"}`, false},
	{"short unicode escape", `{"message":"\u12"}`, false},
	{"unicode escape not hex", `{"message":"\u00zz"}`, false},
	{"missing colon", `{"message" "x"}`, false},
	{"trailing comma", `{"message":"x",}`, false},
	{"byte order mark", "\ufeff{}", false},
}

func TestDecodePlain(t *testing.T) {
	for _, tt := range plainCases {
		t.Run(tt.name, func(t *testing.T) {
			if plain := sameAsJSON(t, []byte(tt.body)); plain != tt.plain {
				t.Fatalf("decodePlain took it: %v, want %v", plain, tt.plain)
			}
		})
	}
}

// TestPlainFieldNames: the names decodePlain checks keys in another case
// against are Event's and ObjectRef's JSON names, all of them.
func TestPlainFieldNames(t *testing.T) {
	for _, tt := range []struct {
		typ   reflect.Type
		names []string
	}{{reflect.TypeFor[Event](), eventFields}, {reflect.TypeFor[ObjectRef](), refFields}} {
		var want []string
		for f := range tt.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			want = append(want, name)
		}
		if !reflect.DeepEqual(tt.names, want) {
			t.Fatalf("%s: decodePlain knows %q, the type has %q", tt.typ, tt.names, want)
		}
	}
}

// TestFixturesDecodePlain: everything real Flux controllers sent takes the
// plain decoder, and decodes as with encoding/json.
func TestFixturesDecodePlain(t *testing.T) {
	n := 0
	for _, name := range append(fixture.Scenarios, "cancel-health-checks/superseded") {
		for _, read := range []func(string) ([]fixture.Request, error){fixture.Received, fixture.Emitted} {
			reqs, err := read(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs {
				if !sameAsJSON(t, []byte(r.Body)) {
					t.Fatalf("%s #%d: not decoded by decodePlain: %s", name, r.Seq, r.Body)
				}
				n++
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d fixture bodies", n)
	}
}

// FuzzDecodePlain: whatever the body, Decode gives what encoding/json and
// validate give.
func FuzzDecodePlain(f *testing.F) {
	for _, tt := range plainCases {
		f.Add([]byte(tt.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameAsJSON(t, body)
	})
}
