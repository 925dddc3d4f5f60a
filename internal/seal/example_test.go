package seal_test

import (
	"fmt"

	"github.com/agentrun/agentrun/internal/seal"
)

// The operator signs with its keyring and publishes the public keys;
// anyone who reads them checks a signature, and cannot make one.
func ExampleKeyring_Sign() {
	kr, err := seal.New(map[string][]byte{"k1": seal.NewKey()}, "k1")
	if err != nil {
		panic(err)
	}
	sig := kr.Sign("agentrun/transcript-chunk", []byte("run-uid"), []byte("0"), []byte(`{"messages":[]}`))

	published := seal.MarshalPublicKeys(kr.PublicKeys()) // a ConfigMap's data
	v, err := seal.ParsePublicKeys(published)
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Verify(sig, "agentrun/transcript-chunk", []byte("run-uid"), []byte("0"), []byte(`{"messages":[]}`)))
	fmt.Println(v.Verify(sig, "agentrun/transcript-chunk", []byte("run-uid"), []byte("0"), []byte(`{"messages":["forged"]}`)))
	// Output:
	// <nil>
	// not signed by the operator: its signature does not match its content
}
