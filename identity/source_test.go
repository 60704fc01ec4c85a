package identity

import (
	"strings"
	"testing"
)

func TestParseSource(t *testing.T) {
	tests := []struct {
		in      string
		want    Spec
		wantErr string
	}{
		{in: "key", want: Spec{Kind: KindKey}},
		{in: "value", want: Spec{Kind: KindValue}},
		{in: "header:x-source", want: Spec{Kind: KindHeader, Name: "x-source"}},
		{in: "json:meta.lib", want: Spec{Kind: KindJSON, Path: []string{"meta", "lib"}}},
		{in: "key-prefix::", want: Spec{Kind: KindKeyPrefix, Name: ":"}},
		{in: "key-prefix:/-", want: Spec{Kind: KindKeyPrefix, Name: "/-"}},
		{in: "key-prefix:", wantErr: "empty separator"},
		{in: "key-prefix", wantErr: "missing separator"},
		{in: "", wantErr: "key-prefix:SEP"},
		{in: "nope:x", wantErr: `unknown kind "nope"`},
	}
	for _, tt := range tests {
		got, err := ParseSource(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "identity: ") {
				t.Errorf("ParseSource(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSource(%q): %v", tt.in, err)
			continue
		}
		if got.String() != tt.in || got.String() != tt.want.String() {
			t.Errorf("ParseSource(%q) = %+v (%q), want %+v", tt.in, got, got.String(), tt.want)
		}
	}
}

func TestSourceExtract(t *testing.T) {
	hdrs := headerSeq(testHeader{"x-source", []byte("lib-a")})
	tests := []struct {
		spec     string
		key      string
		value    string
		want     string
		wantNone bool
	}{
		{spec: "key-prefix::", key: "tenant-1:42", want: "tenant-1"},
		{spec: "key-prefix::", key: "a:b:c", want: "a"},
		{spec: "key-prefix:--", key: "x-y--z", want: "x-y"},
		{spec: "key-prefix::", key: "no-separator", wantNone: true},
		{spec: "key-prefix::", key: ":starts-with-it", wantNone: true},
		{spec: "key-prefix::", key: "", wantNone: true},
		{spec: "header:x-source", key: "k", want: "lib-a"},
		{spec: "header:other", key: "k", wantNone: true},
		{spec: "json:lib", value: `{"lib":"posthog-js"}`, want: "posthog-js"},
		{spec: "key", key: "k", want: "k"},
	}
	for _, tt := range tests {
		s, err := ParseSource(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := s.Extract([]byte(tt.key), []byte(tt.value), hdrs)
		if ok == tt.wantNone || string(got) != tt.want {
			t.Errorf("%s: Extract(key %q, value %q) = %q, %v; want %q, %v", tt.spec, tt.key, tt.value, got, ok, tt.want, !tt.wantNone)
		}
	}
}

func TestSourceExtractAllocs(t *testing.T) {
	s, _ := ParseSource("key-prefix::")
	key := []byte("tenant:1")
	if n := testing.AllocsPerRun(100, func() { s.Extract(key, nil, nil) }); n != 0 {
		t.Errorf("key-prefix Extract allocates %v times", n)
	}
}
