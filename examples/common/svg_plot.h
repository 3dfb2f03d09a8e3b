// A small SVG 1.1 plot writer for the training examples (no plotting dependency): a figure of
// panels stacked vertically that share the x axis (steps), each with line series, a linear or
// log2 y axis (the loss scale is a power of two), ticks at round numbers, a legend, and markers at
// given x positions (skipped steps) drawn as dashed vertical lines or as crosses.
//
// The one decision a reader must know: a point that cannot be drawn — x or y NaN/inf, or y <= 0
// on a log axis — is left out and the line joins its neighbours, so the file never holds a NaN
// coordinate; empty series, single points (drawn as a dot) and constant series all render.
//
//   Figure fig{.title = "train_resnet O2 bf16"};
//   fig.panels.push_back({.title = "training loss", .series = {{.name = "loss", .x = steps, .y = losses}},
//                         .markers = {{.name = "skipped step", .x = skipped}}});
//   fig.panels.push_back({.title = "loss scale", .y_scale = AxisScale::Log2,
//                         .series = {{.name = "scale", .x = steps, .y = scales}}});
//   write_svg("run.svg", fig);
#pragma once
#include <string>
#include <vector>

namespace mg::example {

enum class AxisScale { Linear, Log2 };
enum class MarkerStyle { VerticalLine, Point };

struct Series {
  std::string name;          // legend entry ("" = not in the legend)
  std::vector<double> x, y;  // same length
  std::string color;         // SVG colour ("#1f77b4"); "" = the next palette colour
  bool points = false;       // also draw a dot at every point
};

struct Markers {
  std::string name;       // legend entry ("" = not in the legend)
  std::vector<double> x;  // positions on the shared x axis
  std::vector<double> y;  // Point style: one y per x; empty = on the panel's bottom edge
  MarkerStyle style = MarkerStyle::VerticalLine;
  std::string color = "#d62728";
};

struct Panel {
  std::string title;
  std::string y_label;
  AxisScale y_scale = AxisScale::Linear;
  std::vector<Series> series;
  std::vector<Markers> markers;
};

struct Figure {
  std::string title;
  std::string x_label = "step";
  int width = 900;         // pixels
  int panel_height = 200;  // pixels of each panel's plot area
  std::vector<Panel> panels;
};

// The figure as a standalone SVG 1.1 document. Series or markers whose x and y lengths differ,
// or a width/height too small to draw in, are an mg::Error.
std::string render_svg(const Figure& fig);
// render_svg written to `path`; an mg::Error naming the file if it cannot be written.
void write_svg(const std::string& path, const Figure& fig);

// Tick positions at round numbers (1, 2 or 5 times a power of ten) covering [lo, hi]: the first
// is <= lo, the last >= hi, at most max_ticks of them (>= 2). The axis spans first..last.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);
// Powers of two covering [lo, hi] (0 < lo <= hi), every k-th exponent so at most max_ticks
// (the last is 2^1023 when hi is above it: no finite power of two is larger).
std::vector<double> log2_ticks(double lo, double hi, int max_ticks);
// Text made safe for XML content and attribute values (& < > " ' escaped; control characters and
// invalid UTF-8 become '?').
std::string xml_escape(const std::string& s);

}  // namespace mg::example
