package routerhttp

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The fresh-user finding: /status and GET /admin/models/{m}/admission showed
// max_hold and keepalive_after in nanoseconds (600000000000). They are Go
// duration strings now, the form the PUT takes, so a GET can be PUT back; the
// benchmark still decodes /status, and the card still prints the hold.
func TestAdmissionDurationsAsStrings(t *testing.T) {
	rt, srv := newAdmin(t, "", "m")
	if code, body := adminDo(t, srv, "PUT", "/admin/models/m/admission", "", `{"mode":"fit"}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	for _, path := range []string{"/admin/models/m/admission", "/status"} {
		code, body := adminDo(t, srv, "GET", path, "", "")
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		for _, want := range []string{`"max_hold": "10m0s"`, `"keepalive_after": "1m0s"`, `"mode": "fit"`, `"fill_target": 1`, `"max_queue": 1024`} {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s lacks %s:\n%s", path, want, body)
			}
		}
		if strings.Contains(body, "600000000000") || strings.Contains(body, "60000000000") {
			t.Errorf("GET %s still has nanoseconds:\n%s", path, body)
		}
	}

	// What GET gives, PUT takes.
	_, body := adminDo(t, srv, "GET", "/admin/models/m/admission", "", "")
	var view struct {
		Admission map[string]any `json:"admission"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	put := map[string]any{}
	for _, k := range admissionFields {
		put[k] = view.Admission[k]
	}
	put["max_hold"] = "3m0s"
	raw, _ := json.Marshal(put)
	if code, body := adminDo(t, srv, "PUT", "/admin/models/m/admission", "", string(raw)); code != 200 || !strings.Contains(body, `"max_hold": "3m0s"`) {
		t.Errorf("PUT of a GET's fields: %d %s", code, body)
	}

	// The benchmark decodes /status (routerReplicaNames) into Status.
	_, body = adminDo(t, srv, "GET", "/status", "", "")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("decoding /status: %v", err)
	}
	if a := st.Models[0].Admission; a.MaxHold != 3*time.Minute || a.KeepAliveAfter != time.Minute || a.State == "" {
		t.Errorf("decoded admission %+v, want max_hold 3m, keepalive_after 1m, a state", a)
	}

	var card bytes.Buffer
	if err := RenderCard(&card, rt.Card(), 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(card.String(), "max hold 3m0s") {
		t.Errorf("the card lacks the hold:\n%s", card.String())
	}
	// The fill target unrounded and the keep-alive (second fresh-user pass:
	// 0.0001 read "fill 0.00", keepalive_after was missing).
	if !strings.Contains(card.String(), "fill 1 of each KV cache") || !strings.Contains(card.String(), "keep-alive after 1m0s") {
		t.Errorf("the card lacks the fill target or the keep-alive:\n%s", card.String())
	}
}
