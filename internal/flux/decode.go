package flux

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// decodePlain decodes body into ev when it is an event in the plain form
// notification-controller sends: one object, each field spelled as in Event,
// string values, plain keys. It reports false for anything else, and Decode
// then leaves the body to encoding/json, whose result (errors included) is
// the reference: what decodePlain accepts, it decodes exactly as
// encoding/json does (FuzzDecodePlain). It exists because encoding/json's
// reflection was a sixth of the service's CPU per event.
func decodePlain(body []byte, ev *Event) bool {
	s := scanner{b: body}
	s.space()
	if !s.object(func(key []byte) bool { return s.eventMember(key, ev) }) {
		return false
	}
	s.space()
	return s.i == len(s.b)
}

// maxSkipDepth bounds the nesting of unknown values decodePlain skips over;
// deeper ones go to encoding/json.
const maxSkipDepth = 64

type scanner struct {
	b []byte
	i int
}

// eventFields and refFields are Event's and ObjectRef's JSON names, for
// telling a key in another case (which encoding/json matches and decodePlain
// leaves to it) from an unknown one.
var (
	eventFields = []string{"involvedObject", "relatedObject", "severity", "timestamp", "message",
		"reason", "action", "metadata", "reportingController", "reportingInstance"}
	refFields = []string{"kind", "namespace", "name", "uid", "apiVersion", "resourceVersion"}
)

// eventMember reads the value of key into its field. A field given twice is
// read again into what the first gave, as encoding/json does: a string is
// replaced, an object's fields and the metadata's keys are merged.
func (s *scanner) eventMember(key []byte, ev *Event) bool {
	switch string(key) {
	case "involvedObject":
		return s.objectRef(&ev.InvolvedObject)
	case "relatedObject":
		if ev.RelatedObject == nil {
			ev.RelatedObject = new(ObjectRef)
		}
		return s.objectRef(ev.RelatedObject)
	case "severity":
		return s.str(&ev.Severity)
	case "timestamp":
		return s.str(&ev.Timestamp)
	case "message":
		return s.str(&ev.Message)
	case "reason":
		return s.str(&ev.Reason)
	case "action":
		return s.str(&ev.Action)
	case "metadata":
		return s.metadata(&ev.Metadata)
	case "reportingController":
		return s.str(&ev.ReportingController)
	case "reportingInstance":
		return s.str(&ev.ReportingInstance)
	}
	return !foldsToOneOf(key, eventFields) && s.skip(0)
}

func (s *scanner) objectRef(ref *ObjectRef) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "kind":
			return s.str(&ref.Kind)
		case "namespace":
			return s.str(&ref.Namespace)
		case "name":
			return s.str(&ref.Name)
		case "uid":
			return s.str(&ref.UID)
		case "apiVersion":
			return s.str(&ref.APIVersion)
		case "resourceVersion":
			return s.str(&ref.ResourceVersion)
		}
		return !foldsToOneOf(key, refFields) && s.skip(0)
	})
}

// metadata reads an object of strings into the map, made on first use; a
// repeated key keeps its last value, as encoding/json does.
func (s *scanner) metadata(dst *map[string]string) bool {
	if *dst == nil {
		*dst = make(map[string]string, 4)
	}
	m := *dst
	return s.object(func(key []byte) bool {
		var v string
		if !s.str(&v) {
			return false
		}
		m[string(key)] = v
		return true
	})
}

// foldsToOneOf reports whether key names one of fields in another case,
// which encoding/json matches and decodePlain does not. The key is ASCII
// (object passes plain keys only, and leaves the others to encoding/json),
// so ASCII folding is all encoding/json could apply to it.
func foldsToOneOf(key []byte, fields []string) bool {
	for _, f := range fields {
		// Equal lengths first: the conversion of a key that long (at most
		// a field name's) stays on the stack.
		if len(key) == len(f) && strings.EqualFold(string(key), f) {
			return true
		}
	}
	return false
}

// object reads an object at s.i, calling member for each key with s.i at its
// value; member reads the value.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.consume('{') {
		return false
	}
	s.space()
	if s.consume('}') {
		return true
	}
	for {
		s.space()
		start := s.i
		plain, ok := s.stringEnd()
		if !ok || !plain {
			return false
		}
		key := s.b[start+1 : s.i-1]
		s.space()
		if !s.consume(':') {
			return false
		}
		s.space()
		if !member(key) {
			return false
		}
		s.space()
		if !s.consume(',') {
			return s.consume('}')
		}
	}
}

// str reads a string value. A null or any other kind of value is left to
// encoding/json (null keeps the field as it was there, a number is an error).
func (s *scanner) str(dst *string) bool {
	start := s.i
	plain, ok := s.stringEnd()
	if !ok {
		return false
	}
	raw := s.b[start:s.i]
	if plain {
		*dst = string(raw[1 : len(raw)-1])
	} else {
		*dst = unquote(raw[1 : len(raw)-1])
	}
	return true
}

// hex4 is the value of the four hex digits b begins with (stringEnd has
// checked them).
func hex4(b []byte) rune {
	v, _ := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v)
}

// unquote resolves the escapes of a valid JSON string's contents as
// encoding/json does: invalid UTF-8 and unpaired surrogates become U+FFFD.
func unquote(b []byte) string {
	var out strings.Builder
	out.Grow(len(b))
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '\\':
			i++
			switch c := b[i]; c {
			case 'b':
				out.WriteByte('\b')
			case 'f':
				out.WriteByte('\f')
			case 'n':
				out.WriteByte('\n')
			case 'r':
				out.WriteByte('\r')
			case 't':
				out.WriteByte('\t')
			case 'u':
				r := hex4(b[i+1:])
				i += 4
				if utf16.IsSurrogate(r) && i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(b[i+3:])); pair != utf8.RuneError {
						r = pair
						i += 6
					}
				}
				out.WriteRune(r) // U+FFFD for a surrogate left unpaired
			default: // '"', '\\' or '/': stringEnd let no other through
				out.WriteByte(c)
			}
			i++
		case c < utf8.RuneSelf:
			out.WriteByte(c)
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			out.WriteRune(r) // U+FFFD for a byte that starts no valid rune
			i += n
		}
	}
	return out.String()
}

// stringEnd moves past the JSON string at s.i. plain is false when it holds
// an escape or a byte above ASCII; ok is false when there is no valid string.
func (s *scanner) stringEnd() (plain, ok bool) {
	b := s.b
	if s.i >= len(b) || b[s.i] != '"' {
		return false, false
	}
	plain = true
	for i := s.i + 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return plain, true
		case c == '\\':
			plain = false
			if i++; i >= len(b) {
				return false, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return false, false
				}
				if !IsHex(string(b[i+1 : i+5])) {
					return false, false
				}
				i += 4
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		case c >= 0x80:
			plain = false
		}
	}
	return false, false
}

// skip moves past any valid JSON value at s.i.
func (s *scanner) skip(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, ok := s.stringEnd()
		return ok
	case '{':
		return depth < maxSkipDepth && s.object(func([]byte) bool { return s.skip(depth + 1) })
	case '[':
		if depth >= maxSkipDepth {
			return false
		}
		s.i++
		s.space()
		if s.consume(']') {
			return true
		}
		for {
			s.space()
			if !s.skip(depth + 1) {
				return false
			}
			s.space()
			if !s.consume(',') {
				return s.consume(']')
			}
		}
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number moves past -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	s.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}
