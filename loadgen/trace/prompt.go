package trace

import (
	"bufio"
	"fmt"
	"io"
	"math"
)

// Synth writes the prompt text of trace requests so that two requests share
// exactly the text of their common leading run of full-block ids: block id b
// becomes a fixed run of WordsPerBlock words that depends only on (Salt, b); the
// rest of the prompt (the last, partial block and whatever the full blocks do
// not cover) is words unique to the request (Salt, request index). A word is 4
// lower-case letters, so it is exactly one token for the simulator's tokenizer
// (sim.Tokenize: a word of at most 4 bytes is one token); on a real server the
// words per block come from calibration (Calibration). Text is produced word by
// word as it is written, never held whole.
type Synth struct {
	// BlockSize is the trace's tokens per hash id (DefaultBlockSize if 0).
	BlockSize int
	// TokensPerWord is the server's tokens per synthesized word (1 on the
	// simulator; 0 means 1).
	TokensPerWord float64
	// Overhead is the tokens the chat template adds around the content (for the
	// simulator's ChatML template with one user message and the generation
	// prompt: 10). The content is InputLength - Overhead tokens.
	Overhead int
	// Salt varies the text between runs (0 is a valid salt).
	Salt uint64
}

func (s *Synth) blockSize() int {
	if s.BlockSize <= 0 {
		return DefaultBlockSize
	}
	return s.BlockSize
}

func (s *Synth) tpw() float64 {
	if s.TokensPerWord <= 0 {
		return 1
	}
	return s.TokensPerWord
}

// WordsPerBlock returns the words of one full block: BlockSize / TokensPerWord,
// rounded, at least 1.
func (s *Synth) WordsPerBlock() int {
	return max(1, int(math.Round(float64(s.blockSize())/s.tpw())))
}

// Words returns the words of request r's content: its content tokens
// (InputLength - Overhead, at least 1) over TokensPerWord, rounded.
func (s *Synth) Words(r *Request) int {
	return max(1, int(math.Round(float64(max(1, r.InputLength-s.Overhead))/s.tpw())))
}

// Each calls fn with every word of request r (index: its position in the trace,
// which makes the unique part unique), in order. The byte slice is reused
// between calls.
func (s *Synth) Each(r *Request, index int, fn func(word []byte) error) error {
	n := s.Words(r)
	wpb := s.WordsPerBlock()
	full := r.FullBlocks(s.blockSize())
	var w [4]byte
	for i := 0; i < n; i++ {
		var h uint64
		if b := i / wpb; b < full {
			h = chainHash(chainHash(s.Salt, r.HashIDs[b]), int64(i%wpb))
		} else {
			h = chainHash(chainHash(^s.Salt, int64(index)), int64(i))
		}
		for k := range w {
			w[k] = 'a' + byte(h%26)
			h /= 26
		}
		if err := fn(w[:]); err != nil {
			return err
		}
	}
	return nil
}

// WriteContent writes request r's content to w: its words separated by spaces,
// with a line break after every 16 words.
func (s *Synth) WriteContent(w io.Writer, r *Request, index int) error {
	bw := bufio.NewWriterSize(w, 32<<10)
	i := 0
	err := s.Each(r, index, func(word []byte) error {
		if i > 0 {
			sep := byte(' ')
			if i%16 == 0 {
				sep = '\n'
			}
			bw.WriteByte(sep)
		}
		i++
		_, err := bw.Write(word)
		return err
	})
	if err != nil {
		return fmt.Errorf("writing the prompt of request %d: %w", index, err)
	}
	return bw.Flush()
}
