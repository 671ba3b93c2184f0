package trace

import (
	"container/list"
	"errors"
	"github.com/lmwarden/warden/internal/testkit/sharedtrace"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func openTrace(t testing.TB) *Reader {
	t.Helper()
	f, err := os.Open(sharedtrace.Path(t, sharedtrace.Mooncake))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return NewReader(f, "conversation_trace.jsonl", 0)
}

// The Mooncake paper's Table 2, conversation column: 12,031 requests, average
// input 12,035 and output 343 tokens.
func TestStatsMooncakeTable2(t *testing.T) {
	s, err := ReadStats(openTrace(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 12031 || math.Round(s.MeanInput) != 12035 || math.Round(s.MeanOutput) != 343 {
		t.Errorf("requests %d, mean input %.1f, mean output %.1f; want 12031, 12035, 343", s.Requests, s.MeanInput, s.MeanOutput)
	}
	if s.MaxInput != 126195 {
		t.Errorf("max input %d, want 126195 (fixture README)", s.MaxInput)
	}
	if s.CacheRatioPct < 30 || s.CacheRatioPct > 45 {
		t.Errorf("cache ratio %.1f %%, want near the paper's ~40 %%", s.CacheRatioPct)
	}
	total := 0
	for k, n := range s.TurnsPerConversation {
		total += k * n
	}
	if total != s.Requests || s.Conversations <= 0 || s.Conversations >= s.Requests {
		t.Errorf("conversations %d with turns summing to %d, want turns summing to %d", s.Conversations, total, s.Requests)
	}
	t.Logf("stats: %+v", s)
}

// refLRU is an independent LRU over block ids (container/list, one pass per
// capacity): the same rule as LRU written another way.
func refLRUHitPct(reqs []Request, capBlocks, blockSize int) float64 {
	l := list.New()
	where := map[int64]*list.Element{}
	var hit, all int64
	for _, r := range reqs {
		full := r.InputLength / blockSize
		k := 0
		for k < full && where[r.HashIDs[k]] != nil {
			k++
		}
		hit += int64(k * blockSize)
		all += int64(r.InputLength)
		for i := full - 1; i >= 0; i-- {
			id := r.HashIDs[i]
			if e := where[id]; e != nil {
				l.MoveToFront(e)
				continue
			}
			where[id] = l.PushFront(id)
			if l.Len() > capBlocks {
				old := l.Back()
				l.Remove(old)
				delete(where, old.Value.(int64))
			}
		}
	}
	return 100 * float64(hit) / float64(all)
}

func TestLRUMatchesIndependentLRU(t *testing.T) {
	var reqs []Request
	if err := Each(openTrace(t), func(r Request) error { reqs = append(reqs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	caps := []int{100_000, 1_000_000, 3_000_000, 10_000_000}
	got, err := LRUCurve(openTrace(t), caps)
	if err != nil {
		t.Fatal(err)
	}
	prev := -1.0
	for i, c := range caps {
		want := refLRUHitPct(reqs, c/DefaultBlockSize, DefaultBlockSize)
		if d := math.Abs(got[i].HitPct - want); d > 0.5 {
			t.Errorf("capacity %d: LRU %.2f %%, independent %.2f %%", c, got[i].HitPct, want)
		}
		if got[i].HitPct < prev {
			t.Errorf("capacity %d: hit %.2f %% below the smaller capacity's %.2f %%", c, got[i].HitPct, prev)
		}
		prev = got[i].HitPct
		t.Logf("capacity %d tokens: %.2f %% (independent %.2f %%)", c, got[i].HitPct, want)
	}
}

func TestReaderErrorsNameTheLine(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`
	for _, tc := range []struct {
		name, text string
		line       int    // 0: no line (empty trace)
		want       string // part of the message
	}{
		{"malformed", good + "\n{\"timestamp\": 1, \"input_length\": 6\n", 2, "malformed"},
		{"ids count", good + "\n" + `{"timestamp": 5, "input_length": 1025, "output_length": 5, "hash_ids": [0, 1]}`, 2, "want ceil(1025 / 512) = 3"},
		{"unsorted", `{"timestamp": 9, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}` + "\n\n" + good, 3, "sorted"},
		{"unknown field", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1], "tokens": 3}`, 1, "unknown field"},
		{"missing field", `{"timestamp": 0, "input_length": 600, "hash_ids": [0, 1]}`, 1, "output_length"},
		{"negative", `{"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`, 1, "negative"},
		{"empty", "", 0, "no requests"},
		{"blank lines only", "\n  \n", 0, "no requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.text), "t.jsonl", 0)
			var err error
			for err == nil {
				_, err = r.Next()
			}
			if tc.line == 0 {
				if !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want ErrEmpty", err)
				}
				return
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tc.line || !strings.Contains(err.Error(), tc.want) ||
				!strings.HasPrefix(err.Error(), "t.jsonl line ") {
				t.Fatalf("err %v, want line %d mentioning %q", err, tc.line, tc.want)
			}
		})
	}
}

func TestChainerConversations(t *testing.T) {
	// Request 2 continues 0 (0's two full blocks lead 2's ids); 1 shares only
	// block 0 with 0 (a common system prompt), so it starts a conversation; 3
	// continues 2 (longest match), not 0.
	reqs := []Request{
		{InputLength: 1100, HashIDs: []int64{0, 1, 2}},
		{InputLength: 1100, HashIDs: []int64{0, 5, 6}},
		{InputLength: 2000, HashIDs: []int64{0, 1, 7, 8}},
		{InputLength: 2100, HashIDs: []int64{0, 1, 7, 8, 9}},
		{InputLength: 600, HashIDs: []int64{0, 9}}, // block 0 only: a new conversation
	}
	want := []Turn{{0, -1, 0, 0}, {1, -1, 1, 0}, {2, 0, 0, 1}, {3, 2, 0, 2}, {4, -1, 4, 0}}
	c := NewChainer(512)
	for i := range reqs {
		if got := c.Add(&reqs[i]); got != want[i] {
			t.Errorf("request %d: %+v, want %+v", i, got, want[i])
		}
	}
}

func TestSliceWindowSpeedupSample(t *testing.T) {
	var sb strings.Builder
	o := SliceOptions{From: 10 * time.Minute, To: 20 * time.Minute, Speedup: 2, Sample: 0.5, Seed: 7}
	read, written, err := Slice(openTrace(t), NewWriter(&sb), o)
	if err != nil {
		t.Fatal(err)
	}
	if read != 12031 || written == 0 || written >= read/6 {
		t.Fatalf("read %d, wrote %d", read, written)
	}
	// Every written request lies in [0, 5 min) and is in a sampled conversation.
	out := NewReader(strings.NewReader(sb.String()), "slice", 0)
	n := 0
	err = Each(out, func(r Request) error {
		n++
		if r.Timestamp < 0 || r.Timestamp >= 5*time.Minute {
			t.Errorf("line %d: timestamp %v outside [0, 5m)", r.Line, r.Timestamp)
		}
		return nil
	})
	if err != nil || n != written {
		t.Fatalf("re-read %d of %d: %v", n, written, err)
	}
	// Sampling keeps whole conversations: no kept later turn whose conversation
	// was dropped, and about half the conversations.
	s, _ := NewSlicer(SliceOptions{Sample: 0.5, Seed: 7}, 0)
	convs, kept := map[int]bool{}, 0
	err = Each(openTrace(t), func(r Request) error {
		tn, ok := s.Keep(&r)
		if prev, seen := convs[tn.Conversation]; seen && prev != ok {
			t.Errorf("request %d: conversation %d split by the sample", tn.Index, tn.Conversation)
		}
		if _, seen := convs[tn.Conversation]; !seen && ok {
			kept++
		}
		convs[tn.Conversation] = ok
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if f := float64(kept) / float64(len(convs)); f < 0.45 || f > 0.55 {
		t.Errorf("kept %.3f of conversations, want about 0.5", f)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	in := Request{Timestamp: 1234 * time.Millisecond, InputLength: 513, OutputLength: 9, HashIDs: []int64{4, 5}, SessionID: "s1"}
	var sb strings.Builder
	if err := NewWriter(&sb).Write(in); err != nil {
		t.Fatal(err)
	}
	out, err := NewReader(strings.NewReader(sb.String()), "", 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	if out.Timestamp != in.Timestamp || out.InputLength != 513 || out.OutputLength != 9 || len(out.HashIDs) != 2 || out.SessionID != "s1" {
		t.Errorf("round trip %+v -> %q -> %+v", in, sb.String(), out)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}` + "\n"))
	f.Add([]byte("{\n}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(strings.NewReader(string(b)), "f", 0)
		for range 1000 {
			req, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				if _, err2 := r.Next(); err2 == nil {
					t.Fatal("an error did not repeat")
				}
				return
			}
			if len(req.HashIDs) != (req.InputLength+511)/512 {
				t.Fatalf("accepted %+v", req)
			}
		}
	})
}

func TestSynthSharesExactlyTheCommonBlocks(t *testing.T) {
	s := Synth{BlockSize: 4, Overhead: 2}
	a := Request{InputLength: 14, HashIDs: []int64{0, 1, 2, 3}}
	b := Request{InputLength: 14, HashIDs: []int64{0, 1, 9, 3}}
	words := func(r *Request, idx int) []string {
		var out []string
		s.Each(r, idx, func(w []byte) error { out = append(out, string(w)); return nil })
		return out
	}
	wa, wb := words(&a, 0), words(&b, 1)
	if len(wa) != 12 || len(wb) != 12 { // 14 - 2 overhead
		t.Fatalf("words %d and %d, want 12", len(wa), len(wb))
	}
	common := 0
	for common < len(wa) && wa[common] == wb[common] {
		common++
	}
	if common != 8 { // blocks 0 and 1
		t.Errorf("common leading words %d, want 8: %v / %v", common, wa, wb)
	}
	// The partial last block (words 12 on) is not in the text; words 8-11 are
	// block 2 vs 9, so they differ.
	if strings.Join(wa[8:], " ") == strings.Join(wb[8:], " ") {
		t.Errorf("the unique part is shared: %v", wa[8:])
	}
	var sb1, sb2 strings.Builder
	s.WriteContent(&sb1, &a, 0)
	s.WriteContent(&sb2, &a, 0)
	if sb1.String() != sb2.String() || len(strings.Fields(sb1.String())) != 12 {
		t.Errorf("content not deterministic or wrong length: %q", sb1.String())
	}
}
