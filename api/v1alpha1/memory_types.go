package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The defaults of spec.memory's bounds, as the CRD's defaults below say
// them: a run (and a platform policy's caps) that leaves one unset gets
// these.
const (
	DefaultMemoryMaxEntries    = 1000
	DefaultMemoryMaxEntryBytes = 4096
	DefaultMemoryTTL           = 720 * time.Hour
)

// MemorySpec names the memory a run reads and writes through the builtin
// tools memory.remember and memory.recall: entries that outlive the run,
// shared by every run of the namespace that names the same memory, kept
// in the operator's archive (PostgreSQL). The bounds are checked when an
// entry is written: a call over one is refused with an observation that
// names the bound, and the run goes on.
type MemorySpec struct {
	// name is the memory's name; runs of the same namespace that give the
	// same name share its entries, runs of other namespaces never see
	// them.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="memory.name must be a DNS label such as support-notes: lower-case letters, digits and -"
	Name string `json:"name"`

	// maxEntries is the most entries the memory may hold (entries that
	// have expired do not count). A memory.remember that would add one
	// more is refused; one that replaces a key's entry is not. Defaults to
	// 1000.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxEntries *int32 `json:"maxEntries,omitempty"`

	// maxEntryBytes is the longest text one entry may hold, in bytes.
	// Defaults to 4096.
	// +optional
	// +kubebuilder:default=4096
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxEntryBytes *int32 `json:"maxEntryBytes,omitempty"`

	// ttl is how long an entry is kept after it was last written: an
	// expired entry is neither recalled nor counted, and the operator
	// deletes it. Defaults to 720h (30 days).
	// +optional
	// +kubebuilder:default="720h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="memory.ttl must be a positive duration such as 720h"
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// PlatformMemory is what an AgentRunPolicy allows of spec.memory in the
// namespaces it selects.
type PlatformMemory struct {
	// allowed: false refuses every run that sets spec.memory. Defaults to
	// true.
	// +optional
	Allowed *bool `json:"allowed,omitempty"`

	// maxEntries is the highest memory.maxEntries; a run that sets none
	// gets it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxEntries *int32 `json:"maxEntries,omitempty"`

	// maxEntryBytes is the highest memory.maxEntryBytes; a run that sets
	// none gets it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxEntryBytes *int32 `json:"maxEntryBytes,omitempty"`

	// maxTTL is the longest memory.ttl; a run that sets none gets it.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="memory.maxTTL must be a positive duration such as 720h"
	MaxTTL *metav1.Duration `json:"maxTTL,omitempty"`
}
