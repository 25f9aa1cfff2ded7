// Built only by the test Layers.AnUpwardIncludeDoesNotCompile, as a source
// of the store library would be: what its own layer and those below offer.
#include "base/status.h"
#include "events/verifier.h"
#include "store/cold_store.h"
