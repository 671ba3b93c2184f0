// Package deploy holds the deployment files of `warden route` and the tests
// that check them against the router's code (no code of its own): the
// Kubernetes kustomize base under kubernetes/ (decoded strictly into the
// Kubernetes API types, rendered with kustomize's Go API, its router config
// loaded with the router's loader, probes, ports and grace period matched
// against the router's own paths, listener and shutdown bound). Its tests
// import k8s.io and sigs.k8s.io/kustomize modules, which no other package
// does, so the warden binary links none of them. The systemd unit and the CI
// example under systemd/ and ci/ are checked by cmd/warden's tests, which
// parse their command lines with the warden commands' own flags. README.md
// says what is here; docs/operations.md how to use it.
package deploy
