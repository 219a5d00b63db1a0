package jsontext

import (
	"bytes"
	"encoding/json"
	"testing"
)

// AppendString writes what encoding/json writes for any string, with and
// without HTML escaping.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\b\f\n\r\t\x00\x1f\x7f", "<a&b>", "\u2028\u2029", "bad \xff utf8", "chan<- int", "é ✓ 𝄞"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s, true); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q, true) = %s, want %s", s, got, want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendString(nil, s, false); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q, false) = %s, want %s", s, got, want)
		}
	})
}

func TestAppendStringAppends(t *testing.T) {
	if got := string(AppendString([]byte(`{"k":`), "v", true)); got != `{"k":"v"` {
		t.Fatalf("AppendString after a prefix = %s", got)
	}
}
