package tracefmt

import (
	"testing"
	"time"
)

func TestMarshal(t *testing.T) {
	b, err := Marshal(1234567*time.Microsecond, 600, 5, []int64{0, 7}, "")
	if want := `{"timestamp":1234,"input_length":600,"output_length":5,"hash_ids":[0,7]}` + "\n"; err != nil || string(b) != want {
		t.Errorf("got %q, %v; want %q (ms rounded down, no session_id)", b, err, want)
	}
	b, _ = Marshal(0, 1, 0, []int64{3}, "s1")
	if want := `{"timestamp":0,"input_length":1,"output_length":0,"hash_ids":[3],"session_id":"s1"}` + "\n"; string(b) != want {
		t.Errorf("got %q, want %q", b, want)
	}
}
