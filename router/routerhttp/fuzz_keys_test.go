package routerhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/wire"
)

// FuzzExtractKey feeds arbitrary header values and bodies to ExtractKey. Corpus:
// testdata/fuzz/FuzzExtractKey (recorded Claude Code bodies among others).
func FuzzExtractKey(f *testing.F) {
	f.Add("", []byte(`{"model":"m","metadata":{"user_id":"{\"session_id\":\"s\"}"}}`))
	f.Add("80ea92c9-5a20-47b6-aadb-7135b8a1996e", []byte(`{"model":"qwen3-4b"}`))
	f.Add("", []byte(`{"metadata":{"user_id":"user_ab_account__session_0000-1111"}}`))
	f.Add("", []byte(`{"user":"u","model":null}`))
	f.Add(" ", []byte(`[]`))
	f.Add("", []byte("\xff{"))
	f.Fuzz(func(t *testing.T, claude string, body []byte) {
		h := http.Header{}
		h.Set(wire.HeaderClaudeSession, claude)
		h.Set(wire.HeaderSessionID, "fallback")
		cfg := KeyConfig{UseOpenAIUser: true}
		info, err := ExtractKey(h, body, cfg)
		trimmed := bytes.TrimSpace(body)
		isObject := len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed)
		switch {
		case err != nil && !errors.Is(err, ErrBadBody):
			t.Fatalf("error %v does not wrap ErrBadBody", err)
		case err != nil && isObject:
			t.Fatalf("valid JSON object rejected: %v", err)
		case err == nil && len(trimmed) > 0 && !isObject:
			t.Fatalf("body %q accepted though not a JSON object", body)
		}
		if err != nil {
			return
		}
		if len(info.SessionKey) > MaxKeyLen {
			t.Fatalf("key of %d bytes", len(info.SessionKey))
		}
		if info.SessionKey == "" {
			// X-Session-ID is set, so some key must always be found.
			t.Fatalf("no key at all: %+v", info)
		}
		if c := strings.TrimSpace(h.Get(wire.HeaderClaudeSession)); c != "" {
			if info.Source != KeyClaudeHeader || !strings.HasPrefix(c, info.SessionKey) {
				t.Fatalf("header %q present, got %+v", c, info)
			}
		}
		again, _ := ExtractKey(h, body, cfg)
		if again != info {
			t.Fatalf("not deterministic: %+v vs %+v", info, again)
		}
		if r := Redact(info.SessionKey); len(info.SessionKey) > 8 && strings.Contains(r, info.SessionKey) {
			t.Fatalf("Redact leaked the key: %q", r)
		}
	})
}

// FuzzReadRequestBody checks the partial body reader against a full decode with
// encoding/json into a map (exact member names, last duplicate wins).
func FuzzReadRequestBody(f *testing.F) {
	f.Add([]byte(`{"model":"m","metadata":{"user_id":"x"},"user":"u"}`))
	f.Add([]byte(`{"messages":[{"content":"a \"quoted\" {model} \\"}],"model" : "m2" }`))
	f.Add([]byte(`{"mod\u0065l":"escaped name","model":"last wins","model":"really"}`))
	f.Add([]byte(`{"a":[1,{"b":[]}],"user":null,"metadata":{}}`))
	f.Add([]byte(` {"model":"\\\\"} `))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := readRequestBody(body)
		trimmed := bytes.TrimSpace(body)
		var ref map[string]json.RawMessage
		refErr := json.Unmarshal(trimmed, &ref)
		isObject := len(trimmed) > 0 && trimmed[0] == '{' && refErr == nil
		if (err == nil) != isObject {
			t.Fatalf("readRequestBody err %v, reference err %v", err, refErr)
		}
		if err != nil {
			return
		}
		for name, raw := range map[string]json.RawMessage{"model": got.Model, "metadata": got.Metadata, "user": got.User} {
			if !bytes.Equal(raw, ref[name]) {
				t.Fatalf("member %q: got %q, reference %q", name, raw, ref[name])
			}
		}
	})
}
