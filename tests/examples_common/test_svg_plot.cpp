// SVG plot: the output is well-formed XML (checked by a small parser that is itself tested), every
// series path has one point per drawable input point, non-finite points never reach a coordinate,
// log2 axes tick at powers of two, markers and legends appear, text is escaped; empty, single-point
// and constant series, and the tick algorithms on their own.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "examples/common/svg_plot.h"
#include "examples_test_util.h"
#include "test_util.h"

using namespace mg::example;
using mg::test::parse_xml;
using mg::test::XmlDoc;
using mg::test::XmlElement;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

XmlDoc parse_ok(const std::string& svg) {
  XmlDoc doc = parse_xml(svg);
  INFO(svg);
  REQUIRE(doc.error == "");
  REQUIRE(!doc.elements.empty());
  const XmlElement& root = doc.elements[0];
  REQUIRE(root.name == "svg");
  CHECK(root.attrs.at("xmlns") == "http://www.w3.org/2000/svg");
  CHECK(root.attrs.at("version") == "1.1");
  return doc;
}

std::vector<const XmlElement*> with_class(const XmlDoc& doc, const std::string& name, const std::string& cls,
                                          int panel = -1) {
  // panel >= 0: only descendants of the panel-th <g class="panel">
  int panel_index = -1;
  if (panel >= 0) {
    int seen = 0;
    for (std::size_t i = 0; i < doc.elements.size(); ++i) {
      const auto& e = doc.elements[i];
      if (e.name == "g" && e.attrs.count("class") && e.attrs.at("class") == "panel" && seen++ == panel) {
        panel_index = int(i);
      }
    }
    REQUIRE(panel_index >= 0);
  }
  std::vector<const XmlElement*> out;
  for (const XmlElement& e : doc.elements) {
    if (e.name != name || !e.attrs.count("class") || e.attrs.at("class") != cls) continue;
    bool inside = panel < 0;
    for (int p = e.parent; !inside && p >= 0; p = doc.elements[std::size_t(p)].parent) inside = p == panel_index;
    if (inside) out.push_back(&e);
  }
  return out;
}

// Numbers in a path's d attribute, and the number of points (M and L commands) in it.
std::vector<double> path_numbers(const std::string& d) {
  std::vector<double> out;
  std::string tok;
  for (const char c : d + " ") {
    if (c == 'M' || c == 'L' || c == ' ' || c == ',') {
      if (!tok.empty()) {
        char* end = nullptr;
        out.push_back(std::strtod(tok.c_str(), &end));
        REQUIRE(*end == '\0');
      }
      tok.clear();
    } else {
      tok += c;
    }
  }
  return out;
}
std::size_t path_points(const std::string& d) {
  return std::size_t(std::count_if(d.begin(), d.end(), [](char c) { return c == 'M' || c == 'L'; }));
}

// Every coordinate attribute and path number in the document is a finite number.
void require_finite_coordinates(const XmlDoc& doc) {
  for (const XmlElement& e : doc.elements) {
    for (const auto& [k, v] : e.attrs) {
      if (k == "d") {
        for (double x : path_numbers(v)) REQUIRE(std::isfinite(x));
      } else if (k == "x" || k == "y" || k == "x1" || k == "y1" || k == "x2" || k == "y2" || k == "cx" || k == "cy" ||
                 k == "r" || k == "width" || k == "height") {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        INFO(e.name << " " << k << "=" << v);
        REQUIRE(*end == '\0');
        REQUIRE(std::isfinite(x));
      }
    }
  }
}

// A tick label of a log2 axis ("65536", "0.25", "2^24") as its value.
double log_label_value(const std::string& label) {
  if (label.starts_with("2^")) return std::ldexp(1.0, std::stoi(label.substr(2)));
  return std::stod(label);
}

bool is_power_of_two(double v) {
  int e = 0;
  return v > 0 && std::frexp(v, &e) == 0.5;
}

Figure training_figure() {
  std::vector<double> steps, loss, scale;
  for (int s = 1; s <= 100; ++s) {
    steps.push_back(s);
    loss.push_back(2.3 * std::exp(-s / 40.0));
    scale.push_back(s < 30 ? 65536.0 : s < 77 ? 32768.0 : 16384.0);
  }
  loss[29] = kInf;  // the overflowing steps: their loss is not drawn
  loss[76] = kNaN;
  Figure fig{.title = "train_resnet O2 bf16"};
  fig.panels.push_back({.title = "training loss",
                        .y_label = "loss",
                        .series = {{.name = "train loss", .x = steps, .y = loss}},
                        .markers = {{.name = "skipped step", .x = {30, 77}}}});
  fig.panels.push_back(
      {.title = "evaluation accuracy",
       .series = {{.name = "eval acc", .x = {25, 50, 75, 100}, .y = {0.61, 0.78, 0.84, 0.86}, .points = true}}});
  fig.panels.push_back(
      {.title = "loss scale",
       .y_scale = AxisScale::Log2,
       .series = {{.name = "loss scale", .x = steps, .y = scale}},
       .markers = {{.name = "skipped", .x = {30, 77}, .y = {32768, 16384}, .style = MarkerStyle::Point}}});
  return fig;
}

}  // namespace

TEST_CASE("svg: the XML checker rejects malformed documents", "[examples][svg]") {
  CHECK(parse_xml("<a><b/></a>").error == "");
  CHECK(parse_xml("<?xml version=\"1.0\"?>\n<a x='1' y=\"&amp;&#60;&#x3c;\">t &lt; u</a>\n").error == "");
  CHECK(parse_xml("<a><b></a></b>").error != "");
  CHECK(parse_xml("<a x=1/>").error != "");
  CHECK(parse_xml("<a x=\"1\" x=\"2\"/>").error != "");
  CHECK(parse_xml("<a>&foo;</a>").error != "");
  CHECK(parse_xml("<a>AT&T</a>").error != "");
  CHECK(parse_xml("<a>1 < 2</a>").error != "");
  CHECK(parse_xml("<a x=\"<\"/>").error != "");
  CHECK(parse_xml("<a/><b/>").error != "");
  CHECK(parse_xml("<a>").error != "");
  CHECK(parse_xml("text<a/>").error != "");
  CHECK(parse_xml("<a>\x01</a>").error != "");
  CHECK(parse_xml("").error != "");
}

TEST_CASE("svg: a training figure is well-formed with the expected paths, markers and legends", "[examples][svg]") {
  const std::string svg = render_svg(training_figure());
  CHECK(svg.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n<svg "));
  const XmlDoc doc = parse_ok(svg);
  require_finite_coordinates(doc);

  // one path per series, one point per finite input point
  const auto loss_paths = with_class(doc, "path", "series", 0);
  REQUIRE(loss_paths.size() == 1);
  CHECK(path_points(loss_paths[0]->attrs.at("d")) == 98);  // 100 points, one inf and one NaN left out
  const auto acc_paths = with_class(doc, "path", "series", 1);
  REQUIRE(acc_paths.size() == 1);
  CHECK(path_points(acc_paths[0]->attrs.at("d")) == 4);
  CHECK(with_class(doc, "circle", "point", 1).size() == 4);  // .points = true
  CHECK(with_class(doc, "circle", "point", 0).empty());
  const auto scale_paths = with_class(doc, "path", "series", 2);
  REQUIRE(scale_paths.size() == 1);
  CHECK(path_points(scale_paths[0]->attrs.at("d")) == 100);

  // skipped steps: two dashed lines in the loss panel, two crosses in the scale panel
  CHECK(with_class(doc, "line", "marker", 0).size() == 2);
  CHECK(with_class(doc, "path", "marker", 2).size() == 2);
  CHECK(with_class(doc, "line", "marker", 2).empty());

  // titles and legends
  REQUIRE(with_class(doc, "text", "title").size() == 1);
  CHECK(with_class(doc, "text", "title")[0]->text == "train_resnet O2 bf16");
  std::vector<std::string> panel_titles, legend;
  for (const auto* e : with_class(doc, "text", "panel-title")) panel_titles.push_back(e->text);
  for (const auto* e : with_class(doc, "text", "legend-text")) legend.push_back(e->text);
  CHECK(panel_titles == std::vector<std::string>{"training loss", "evaluation accuracy", "loss scale"});
  CHECK(legend == std::vector<std::string>{"train loss", "skipped step", "eval acc", "loss scale", "skipped"});
  CHECK(with_class(doc, "text", "ylabel", 0).size() == 1);
  CHECK(with_class(doc, "text", "xlabel").size() == 1);

  // the shared x axis is labelled once, under the bottom panel, with round numbers
  CHECK(with_class(doc, "text", "xtick", 0).empty());
  std::vector<std::string> xticks;
  for (const auto* e : with_class(doc, "text", "xtick", 2)) xticks.push_back(e->text);
  CHECK(xticks == std::vector<std::string>{"0", "20", "40", "60", "80", "100"});

  // the log2 axis ticks at powers of two covering 16384..65536
  const auto scale_ticks = with_class(doc, "text", "ytick", 2);
  REQUIRE(scale_ticks.size() >= 2);
  for (const auto* t : scale_ticks) CHECK(is_power_of_two(log_label_value(t->text)));
  CHECK(log_label_value(scale_ticks.front()->text) <= 16384);
  CHECK(log_label_value(scale_ticks.back()->text) >= 65536);
}

TEST_CASE("svg: series points map into the plot area in order", "[examples][svg]") {
  Figure fig;
  fig.panels.push_back({.series = {{.x = {0, 5, 10}, .y = {0, 10, 5}}}});
  const XmlDoc doc = parse_ok(render_svg(fig));
  const auto frame = with_class(doc, "rect", "frame", 0);
  REQUIRE(frame.size() == 1);
  const double fx = std::stod(frame[0]->attrs.at("x")), fy = std::stod(frame[0]->attrs.at("y"));
  const double fw = std::stod(frame[0]->attrs.at("width")), fh = std::stod(frame[0]->attrs.at("height"));
  const std::vector<double> d = path_numbers(with_class(doc, "path", "series", 0)[0]->attrs.at("d"));
  REQUIRE(d.size() == 6);
  // x axis 0..10, y axis 0..10 (nice ticks): (0,0) bottom left, (5,10) top middle, (10,5) right middle
  CHECK(d[0] == Approx(fx));
  CHECK(d[1] == Approx(fy + fh));
  CHECK(d[2] == Approx(fx + fw / 2));
  CHECK(d[3] == Approx(fy));
  CHECK(d[4] == Approx(fx + fw));
  CHECK(d[5] == Approx(fy + fh / 2));
}

TEST_CASE("svg: non-finite and (on log axes) non-positive points are skipped", "[examples][svg]") {
  Figure fig;
  fig.panels.push_back({.series = {{.name = "a", .x = {1, 2, kNaN, 4, 5, 6}, .y = {1, kInf, 3, -kInf, kNaN, 2}},
                                   {.name = "all bad", .x = {kNaN, 1}, .y = {1, kNaN}}}});
  fig.panels.push_back(
      {.y_scale = AxisScale::Log2,
       .series = {{.name = "scale", .x = {1, 2, 3, 4}, .y = {0, -8, 1024, 512}}},
       .markers = {{.x = {kNaN, 2, kInf}}, {.x = {3, 4}, .y = {kNaN, 512}, .style = MarkerStyle::Point}}});
  const std::string svg = render_svg(fig);
  const XmlDoc doc = parse_ok(svg);
  require_finite_coordinates(doc);
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf") == std::string::npos);
  const auto first = with_class(doc, "path", "series", 0);
  REQUIRE(first.size() == 1);  // "all bad" draws nothing
  CHECK(path_points(first[0]->attrs.at("d")) == 2);
  const auto log_series = with_class(doc, "path", "series", 1);
  REQUIRE(log_series.size() == 1);
  CHECK(path_points(log_series[0]->attrs.at("d")) == 2);
  CHECK(with_class(doc, "line", "marker", 1).size() == 1);
  CHECK(with_class(doc, "path", "marker", 1).size() == 1);
  // both legend entries are there even though one series has nothing to draw
  CHECK(with_class(doc, "text", "legend-text", 0).size() == 2);
}

TEST_CASE("svg: empty, single-point and constant series and empty figures render", "[examples][svg]") {
  Figure fig{.title = "edge cases"};
  fig.panels.push_back({.title = "empty", .series = {{.name = "nothing"}}});
  fig.panels.push_back({.title = "no series"});
  fig.panels.push_back({.title = "one point", .series = {{.x = {7}, .y = {0.5}}}});
  fig.panels.push_back({.title = "constant", .series = {{.x = {1, 2, 3}, .y = {4, 4, 4}}}});
  fig.panels.push_back(
      {.title = "constant log", .y_scale = AxisScale::Log2, .series = {{.x = {1, 2}, .y = {65536, 65536}}}});
  const XmlDoc doc = parse_ok(render_svg(fig));
  require_finite_coordinates(doc);
  CHECK(with_class(doc, "path", "series", 0).empty());
  CHECK(with_class(doc, "path", "series", 1).empty());
  REQUIRE(with_class(doc, "path", "series", 2).size() == 1);
  CHECK(path_points(with_class(doc, "path", "series", 2)[0]->attrs.at("d")) == 1);
  CHECK(with_class(doc, "circle", "point", 2).size() == 1);  // a lone point is drawn as a dot
  // a constant series gets a band around its value, with distinct ticks
  const auto ticks = with_class(doc, "text", "ytick", 3);
  REQUIRE(ticks.size() >= 2);
  CHECK(std::stod(ticks.front()->text) < 4);
  CHECK(std::stod(ticks.back()->text) > 4);
  std::vector<std::string> log_ticks;
  for (const auto* t : with_class(doc, "text", "ytick", 4)) log_ticks.push_back(t->text);
  CHECK(log_ticks == std::vector<std::string>{"32768", "65536", "131072"});

  parse_ok(render_svg(Figure{}));  // no panels at all
  parse_ok(render_svg(Figure{.title = "t", .panels = {Panel{}}}));
}

TEST_CASE("svg: text is XML-escaped", "[examples][svg]") {
  Figure fig{.title = "a < b && c > d \"q\" 'x'", .x_label = "step <n>"};
  fig.panels.push_back({.title = "<loss> & co",
                        .y_label = "l&l",
                        .series = {{.name = "<&>", .x = {1, 2}, .y = {1, 2}, .color = "#1f77b4\"/><evil"}},
                        .markers = {{.name = "ctl\x01\x7f", .x = {1}}}});
  const std::string svg = render_svg(fig);
  const XmlDoc doc = parse_ok(svg);
  CHECK(svg.find("a &lt; b &amp;&amp; c &gt; d &quot;q&quot; &apos;x&apos;") != std::string::npos);
  CHECK(with_class(doc, "text", "panel-title")[0]->text == "&lt;loss&gt; &amp; co");
  CHECK(with_class(doc, "text", "xlabel")[0]->text == "step &lt;n&gt;");
  std::vector<std::string> legend;
  for (const auto* e : with_class(doc, "text", "legend-text")) legend.push_back(e->text);
  CHECK(legend == std::vector<std::string>{"&lt;&amp;&gt;", "ctl??"});
  CHECK(svg.find("<evil") == std::string::npos);
  CHECK(xml_escape("caf\xc3\xa9 \xff") == "caf?? ?");  // invalid UTF-8 is replaced, not passed on
  CHECK(xml_escape("caf\xc3\xa9 ok") == "caf\xc3\xa9 ok");
  CHECK(xml_escape("tab\tnl\n") == "tab\tnl\n");
}

TEST_CASE("svg: nice ticks are round numbers covering the range", "[examples][svg]") {
  CHECK(nice_ticks(0, 937, 9) == std::vector<double>{0, 200, 400, 600, 800, 1000});
  CHECK(nice_ticks(1, 100, 9) == std::vector<double>{0, 20, 40, 60, 80, 100});
  const std::vector<double> acc = nice_ticks(0.37, 0.93, 6);
  REQUIRE(acc.size() == 5);
  for (std::size_t i = 0; i < acc.size(); ++i) CHECK(acc[i] == Approx(0.2 * double(i + 1)));
  for (const auto& [lo, hi, n] : std::vector<std::tuple<double, double, int>>{
           {-3, 7, 6}, {0.001, 0.0013, 5}, {1e9, 3e9, 6}, {-5, -4.99, 4}, {123456, 123457, 8}, {2, 2, 6}}) {
    const std::vector<double> t = nice_ticks(lo, hi, n);
    INFO(lo << " " << hi);
    REQUIRE(t.size() >= 2);
    CHECK(int(t.size()) <= n);
    CHECK(t.front() <= lo);
    CHECK(t.back() >= hi);
    const double step = t[1] - t[0];
    int e = int(std::floor(std::log10(step) + 1e-9));
    const double mantissa = step / std::pow(10.0, e);
    CHECK((mantissa == Approx(1) || mantissa == Approx(2) || mantissa == Approx(5)));
    for (double v : t) CHECK(std::fabs(v / step - std::round(v / step)) < 1e-6 * std::max(1.0, std::fabs(v / step)));
  }
  CHECK(nice_ticks(0, 0, 6) == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  // no overflow or endless loop at the ends of the double range
  for (const auto& t : {nice_ticks(-1e308, 1e308, 5), nice_ticks(1e300, 1e300 * (1 + 1e-15), 5)}) {
    REQUIRE(t.size() >= 2);
    for (double v : t) CHECK(std::isfinite(v));
  }
}

TEST_CASE("svg: log2 ticks are powers of two covering the range", "[examples][svg]") {
  CHECK(log2_ticks(0.5, 3, 7) == std::vector<double>{0.5, 1, 2, 4});
  CHECK(log2_ticks(65536, 65536, 7) == std::vector<double>{32768, 65536, 131072});
  const std::vector<double> wide = log2_ticks(1, 65536, 7);
  CHECK(wide == std::vector<double>{1, 8, 64, 512, 4096, 32768, 262144});
  for (const auto& [lo, hi] : std::vector<std::pair<double, double>>{
           {1, 16777216}, {1.5e-5, 65536}, {3, 5}, {1e-300, 1e300}, {4.9e-324, 1.7e308}}) {
    const std::vector<double> t = log2_ticks(lo, hi, 7);
    INFO(lo << " " << hi);
    REQUIRE(t.size() >= 2);
    CHECK(t.size() <= 7);
    CHECK(t.front() <= lo);
    CHECK(t.back() >= std::min(hi, std::ldexp(1.0, 1023)));  // no finite power of two is above 2^1023
    for (double v : t) CHECK(is_power_of_two(v));
  }
}

TEST_CASE("svg: extreme values still give finite coordinates", "[examples][svg]") {
  Figure fig;
  fig.panels.push_back({.series = {{.x = {-1e308, 1e308}, .y = {-1e308, 1e308}}}});
  fig.panels.push_back({.y_scale = AxisScale::Log2, .series = {{.x = {0, 1}, .y = {4.9e-324, 1.7e308}}}});
  const XmlDoc doc = parse_ok(render_svg(fig));
  require_finite_coordinates(doc);
  const std::vector<double> d = path_numbers(with_class(doc, "path", "series", 0)[0]->attrs.at("d"));
  REQUIRE(d.size() == 4);
  CHECK(d[2] > d[0]);  // the two points are still apart: the axis spans -1e308..1e308 without overflow
  CHECK(d[1] > d[3]);
  std::vector<std::string> labels;
  for (const auto* t : with_class(doc, "text", "ytick", 0)) labels.push_back(t->text);
  CHECK(labels == std::vector<std::string>{"-1e+308", "1e+308"});
  CHECK(path_points(with_class(doc, "path", "series", 1)[0]->attrs.at("d")) == 2);
}

TEST_CASE("svg: mistakes are errors, write_svg writes the file", "[examples][svg]") {
  Figure fig;
  fig.panels.push_back({.series = {{.name = "loss", .x = {1, 2}, .y = {1}}}});
  MG_REQUIRE_ERROR(render_svg(fig), "render_svg: series \"loss\" of panel 0 has 2 x values but 1 y values");
  fig.panels[0] = Panel{.markers = {{.name = "m", .x = {1, 2}, .y = {1}, .style = MarkerStyle::Point}}};
  MG_REQUIRE_ERROR(render_svg(fig), "markers \"m\" of panel 0 have 2 x values but 1 y values");
  fig.panels[0] = Panel{.markers = {{.name = "v", .x = {1}, .y = {1}}}};
  MG_REQUIRE_ERROR(render_svg(fig), "vertical-line markers \"v\" of panel 0 take no y values");
  MG_REQUIRE_ERROR(render_svg(Figure{.width = 10}), "at least 200 px wide");

  mg::test::TempDir dir;
  const Figure good = training_figure();
  write_svg(dir.file("run.svg"), good);
  CHECK(mg::test::read_file(dir.file("run.svg")) == render_svg(good));
  MG_REQUIRE_ERROR(write_svg(dir.file("missing/run.svg"), good), "write_svg: cannot open");
}

TEST_CASE("svg: the legend moves to the corner that hides the fewest points", "[examples][svg]") {
  // A legend box's position: the x of the first swatch line in it.
  auto legend_x = [](const Panel& panel) {
    Figure fig{.title = "legend"};
    fig.panels.push_back(panel);
    const XmlDoc doc = parse_xml(render_svg(fig));
    REQUIRE(doc.error.empty());
    const auto swatches = with_class(doc, "line", "swatch");
    REQUIRE(!swatches.empty());
    return std::stod(swatches[0]->attrs.at("x1"));
  };
  std::vector<double> x, rising, falling;
  for (int i = 0; i <= 100; ++i) {
    x.push_back(i);
    rising.push_back(i);          // ends in the top right corner (an accuracy curve)
    falling.push_back(100 - i);   // starts in the top left, leaves the top right empty (a loss curve)
  }
  const double left = legend_x({.series = {{.name = "accuracy", .x = x, .y = rising}}});
  const double right = legend_x({.series = {{.name = "loss", .x = x, .y = falling}}});
  CHECK(left < 450);   // 900 px wide figure: the top-right corner was taken by the curve
  CHECK(right > 450);  // the preferred top-right corner is free
}
