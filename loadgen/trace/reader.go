package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lmwarden/warden/internal/tracefmt"
)

// DefaultBlockSize is the tokens per hash id of the Mooncake traces (README of
// FAST25-release/traces: "each hash id stands for a block of 512 tokens").
const DefaultBlockSize = tracefmt.DefaultBlockSize

// Request is one line of a trace.
type Request struct {
	// Timestamp is the arrival instant since the trace's first request (the file
	// stores whole milliseconds).
	Timestamp time.Duration
	// InputLength and OutputLength are prompt and output tokens.
	InputLength, OutputLength int
	// HashIDs has one id per BlockSize tokens of the prompt, ceil(InputLength /
	// BlockSize) of them; the last may stand for a partial block.
	HashIDs []int64
	// SessionID is the recorded conversation key ("" in the Mooncake traces).
	SessionID string
	// Line is the 1-based line of the file the request was read from (0 when
	// the request was not read from a file).
	Line int
}

// FullBlocks returns the number of whole blocks of the prompt, floor(InputLength /
// blockSize): the ids a prefix cache can hold (only full blocks are cached, as in
// vLLM's block pool).
func (r *Request) FullBlocks(blockSize int) int {
	return min(len(r.HashIDs), r.InputLength/blockSize)
}

// ErrEmpty is wrapped by the Reader's error for a trace without a request.
var ErrEmpty = errors.New("trace has no requests")

// LineError is a problem with one line of a trace: "trace.jsonl line 12: cause".
type LineError struct {
	Name string // file name, "" if unknown
	Line int    // 1-based
	Err  error
}

func (e *LineError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("%s line %d: %v", e.Name, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Reader streams the requests of a trace, checking each line: valid JSON with
// exactly the known fields, non-negative lengths, len(hash_ids) ==
// ceil(input_length / block size), timestamps in non-decreasing order. It holds
// one line at a time. Blank lines are skipped.
type Reader struct {
	br        *bufio.Reader
	name      string
	blockSize int
	line      int
	n         int
	last      int64
	err       error
}

// NewReader reads a trace from r; name (a file name, may be "") prefixes errors;
// blockSize <= 0 means DefaultBlockSize.
func NewReader(r io.Reader, name string, blockSize int) *Reader {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), name: name, blockSize: blockSize}
}

// BlockSize returns the tokens per hash id the reader checks against.
func (r *Reader) BlockSize() int { return r.blockSize }

// Next returns the next request; io.EOF after the last one, or an error
// wrapping ErrEmpty when the trace held none. Any other error is a *LineError
// (or a read error) and repeats on later calls.
func (r *Reader) Next() (Request, error) {
	if r.err != nil {
		return Request{}, r.err
	}
	for {
		b, err := r.br.ReadBytes('\n')
		if len(b) == 0 && err != nil {
			if err == io.EOF && r.n == 0 {
				err = fmt.Errorf("reading %s: %w", r.nameOr(), ErrEmpty)
			} else if err != io.EOF {
				err = fmt.Errorf("reading %s: %w", r.nameOr(), err)
			}
			r.err = err
			return Request{}, err
		}
		r.line++
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		req, perr := r.parse(b)
		if perr != nil {
			r.err = &LineError{Name: r.name, Line: r.line, Err: perr}
			return Request{}, r.err
		}
		r.n++
		return req, nil
	}
}

func (r *Reader) nameOr() string {
	if r.name == "" {
		return "trace"
	}
	return r.name
}

func (r *Reader) parse(b []byte) (Request, error) {
	var l tracefmt.Line
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Request{}, fmt.Errorf("malformed request: %w", err)
	}
	if dec.More() {
		return Request{}, errors.New("malformed request: more than one JSON value on the line")
	}
	switch {
	case l.Timestamp == nil:
		return Request{}, errors.New(`missing "timestamp"`)
	case l.InputLength == nil:
		return Request{}, errors.New(`missing "input_length"`)
	case l.OutputLength == nil:
		return Request{}, errors.New(`missing "output_length"`)
	case l.HashIDs == nil:
		return Request{}, errors.New(`missing "hash_ids"`)
	case *l.Timestamp < 0:
		return Request{}, fmt.Errorf("timestamp %d ms is negative", *l.Timestamp)
	case *l.InputLength <= 0:
		return Request{}, fmt.Errorf("input_length %d is not positive", *l.InputLength)
	case *l.OutputLength < 0:
		return Request{}, fmt.Errorf("output_length %d is negative", *l.OutputLength)
	}
	if want := (*l.InputLength + r.blockSize - 1) / r.blockSize; len(l.HashIDs) != want {
		return Request{}, fmt.Errorf("%d hash_ids for input_length %d: want ceil(%d / %d) = %d (is the block size %d?)",
			len(l.HashIDs), *l.InputLength, *l.InputLength, r.blockSize, want, r.blockSize)
	}
	if r.n > 0 && *l.Timestamp < r.last {
		return Request{}, fmt.Errorf("timestamp %d ms is before the previous request's %d ms: the trace must be sorted by timestamp", *l.Timestamp, r.last)
	}
	r.last = *l.Timestamp
	return Request{
		Timestamp:    time.Duration(*l.Timestamp) * time.Millisecond,
		InputLength:  *l.InputLength,
		OutputLength: *l.OutputLength,
		HashIDs:      l.HashIDs,
		SessionID:    l.SessionID,
		Line:         r.line,
	}, nil
}

// Each calls fn for every request of r in order and stops at the first error
// (of the reader or of fn). The end of the trace is not an error.
func Each(r *Reader, fn func(Request) error) error {
	for {
		req, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(req); err != nil {
			return err
		}
	}
}

// Writer writes requests in the trace format, one line each (timestamps in whole
// milliseconds, rounded down; tracefmt.Marshal).
type Writer struct {
	w io.Writer
}

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes one request line.
func (w *Writer) Write(r Request) error {
	b, err := tracefmt.Marshal(r.Timestamp, r.InputLength, r.OutputLength, r.HashIDs, r.SessionID)
	if err != nil {
		return err
	}
	_, err = w.w.Write(b)
	return err
}
