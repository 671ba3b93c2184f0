package routerhttp

import (
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// NewTransport returns the HTTP transport the proxy uses to reach upstreams:
// keep-alive connections (idle ones closed after 4 s, under uvicorn's default 5 s
// keep-alive, so the proxy rarely reuses a connection the server is closing), no
// transparent compression (bytes pass as the upstream sent them), no environment
// proxy. headerTimeout 0 means none.
func NewTransport(dialTimeout, headerTimeout time.Duration) *http.Transport {
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       4 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		DisableCompression:    true,
	}
}

// copyBufferSize is the size of the buffer a response body is copied through:
// httputil.ReverseProxy's own default (reverseproxy.go copyBuffer, 32 KiB). One
// Read of the upstream body fills at most this much, and it is written and flushed
// at once.
const copyBufferSize = 32 << 10

// copyBuffers recycles the response copy buffers. Without a BufferPool,
// ReverseProxy allocates and zeroes a fresh 32 KiB buffer per request, which was
// about two thirds of the proxy's bytes allocated per request and the main source
// of its GC work (BenchmarkProxyFirstEvent).
var copyBuffers httputil.BufferPool = &bufferPool{}

// bufferPool is an httputil.BufferPool over sync.Pool of *[]byte (Put allocates
// only the 24-byte slice header, not 32 KiB).
type bufferPool struct{ p sync.Pool }

func (bp *bufferPool) Get() []byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, copyBufferSize)
}

func (bp *bufferPool) Put(b []byte) {
	if cap(b) != copyBufferSize {
		return
	}
	b = b[:copyBufferSize]
	bp.p.Put(&b)
}
