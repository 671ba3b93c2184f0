package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// marshalFinite encodes a struct like encoding/json does, except that a float
// field holding NaN or ±Inf is written as null (encoding/json refuses them). It
// handles the tags used in this package: a name and omitempty.
func marshalFinite(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv := rv.Field(i)
		if strings.Contains(opts, "omitempty") && fv.IsZero() {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		key, _ := json.Marshal(name)
		buf.Write(key)
		buf.WriteByte(':')
		if fv.Kind() == reflect.Float64 || fv.Kind() == reflect.Float32 {
			if x := fv.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
				buf.WriteString("null")
				continue
			}
		}
		b, err := json.Marshal(fv.Interface())
		if err != nil {
			return nil, fmt.Errorf("encoding field %s: %w", f.Name, err)
		}
		buf.Write(b)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// unmarshalFinite decodes b into the struct pointed to by p after setting every
// float field to NaN, so a null (or absent) float reads back as NaN.
func unmarshalFinite(b []byte, p any) error {
	rv := reflect.ValueOf(p).Elem()
	for i := range rv.NumField() {
		if f := rv.Field(i); f.CanSet() && (f.Kind() == reflect.Float64 || f.Kind() == reflect.Float32) {
			f.SetFloat(math.NaN())
		}
	}
	return json.Unmarshal(b, p)
}

// MarshalJSON writes NaN floats (values that could not be computed) as null.
func (s Summary) MarshalJSON() ([]byte, error) { return marshalFinite(s) }

// UnmarshalJSON reads null floats back as NaN.
func (s *Summary) UnmarshalJSON(b []byte) error {
	type plain Summary
	return unmarshalFinite(b, (*plain)(s))
}
