package simhttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lmwarden/warden/sim"
)

// FuzzDecodeRequest feeds arbitrary bodies to the four request decoders, their
// conversion to template messages and the count_tokens handler. Seeds are in
// testdata/fuzz/FuzzDecodeRequest. Invariants: no panic; every refusal is a 400 with a
// message; a rendered prompt has at least the template's fixed tokens.
func FuzzDecodeRequest(f *testing.F) {
	srv, err := NewServer(DefaultConfig(), 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, body []byte) {
		refused := func(e *apiError) {
			t.Helper()
			if e.status != http.StatusBadRequest || e.message == "" {
				t.Fatalf("refusal %+v", e)
			}
		}
		// <|im_start|> role \n content <|im_end|> \n per message, at least 4 tokens,
		// and the generation prompt's 3.
		rendered := func(msgs []sim.ChatMessage) {
			t.Helper()
			if toks := sim.RenderChat(nil, msgs, true); len(toks) < 4*len(msgs)+3 {
				t.Fatalf("%d messages rendered to %d tokens", len(msgs), len(toks))
			}
		}
		if r, e := decodeChat(body); e != nil {
			refused(e)
		} else if msgs, e := r.chatMessages(); e != nil {
			refused(e)
		} else {
			rendered(msgs)
		}
		if r, e := decodeMessages(body); e != nil {
			refused(e)
		} else if msgs, e := r.chatMessages(); e != nil {
			refused(e)
		} else {
			rendered(msgs)
		}
		if r, e := decodeResponses(body); e != nil {
			refused(e)
		} else if msgs, e := r.inputMessages(); e != nil {
			refused(e)
		} else {
			rendered(msgs)
		}
		if r, e := decodeCompletion(body); e != nil {
			refused(e)
		} else if _, e := r.promptTokens(); e != nil {
			refused(e)
		}

		req := httptest.NewRequest(http.MethodPost, "/v1/messages/count_tokens", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("count_tokens status %d: %s", rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("count_tokens answered invalid JSON %q", rec.Body)
		}
	})
}
