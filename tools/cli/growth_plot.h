// `tbfs watch --plot FILE`: the growth series as a picture (SVG), for
// operators who would rather look than read: the logdir's bytes by class,
// stacked, over time, and below them how full its filesystem is.
#pragma once

#include <string>
#include <vector>

#include "store/growth.h"

namespace tbfs::cli {

// An SVG document of `series` (oldest first; any number of samples),
// titled `title` (any bytes), with a dashed line at warn_at_pct percent.
std::string GrowthSvg(const std::vector<store::GrowthSample>& series, const std::string& title,
                      double warn_at_pct);

}  // namespace tbfs::cli
