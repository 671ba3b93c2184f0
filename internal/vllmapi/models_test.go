package vllmapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFirstModel(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		want, err  string
	}{
		{"served", `{"object":"list","data":[{"id":"qwen3-4b"},{"id":"other"}]}`, 200, "qwen3-4b", ""},
		{"refused", `{"error":"Unauthorized"}`, 401, "", "status 401"},
		{"empty list", `{"object":"list","data":[]}`, 200, "", "lists no model"},
		{"not JSON", `<html>`, 200, "", "decoding GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer k" {
					http.Error(w, "wrong path or header", http.StatusTeapot)
					return
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			got, err := FirstModel(context.Background(), nil, srv.URL+"/", http.Header{"Authorization": {"Bearer k"}})
			if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("got %q, %v; want %q, error with %q", got, err, tc.want, tc.err)
			}
		})
	}
}
