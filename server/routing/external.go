package routing

// External reports whether routing treats a backend as external, that is
// never serving a sensitive call: a backend declared external (what its
// configuration's external says; external unless external: false), and a
// relay that cannot pass the sensitive flag on (it declares no
// identity_headers.sensitive), whatever it declares: the peer would not know
// the call is sensitive and could send it outside. Build [Backend.External]
// with it.
func External(declared, relay bool, sensitiveHeader string) bool {
	return declared || (relay && sensitiveHeader == "")
}
