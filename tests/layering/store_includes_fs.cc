// Built only by the test Layers.AnUpwardIncludeDoesNotCompile, as a source
// of the store library would be: a header of the layer above, which must
// not be found.
#include "fs/filesystem.h"
