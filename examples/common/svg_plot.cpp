#include "examples/common/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "io/json_text.h"

namespace mg::example {

namespace {

// Series colours (matplotlib's tab10 without its red, which marks skipped steps).
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kPaletteSize = int(sizeof kPalette / sizeof kPalette[0]);

// Layout in pixels.
constexpr double kLeft = 78;  // y tick labels and the y label
constexpr double kRight = 20;
constexpr double kTitle = 40;  // figure title row (when there is a title)
constexpr double kTopNoTitle = 12;
constexpr double kPanelTitle = 24;  // panel title row above each plot area
constexpr double kGap = 16;         // between a plot area and the next panel's title
constexpr double kBottom = 50;      // x tick labels and the x label
constexpr double kCharWidth = 6.5;  // rough width of an 11 px sans-serif character (legend box)
constexpr int kMaxXTicks = 9;
constexpr int kMaxYTicks = 6;

// A pixel coordinate; callers only pass finite values, and the guard keeps NaN out regardless.
std::string px(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f", std::fabs(v) < 0.005 ? 0.0 : v);
  return buf;
}

bool drawable(double y, AxisScale scale) { return std::isfinite(y) && (scale == AxisScale::Linear || y > 0); }

// An axis: its ticks, whose first and last are the ends of the axis.
struct Axis {
  AxisScale scale = AxisScale::Linear;
  std::vector<double> ticks;
  double lo() const { return ticks.front(); }
  double hi() const { return ticks.back(); }
  // Position of v along the axis, 0 at lo and 1 at hi.
  double frac(double v) const {
    if (scale == AxisScale::Log2) return (std::log2(v) - std::log2(lo())) / (std::log2(hi()) - std::log2(lo()));
    return (0.5 * v - 0.5 * lo()) / (0.5 * hi() - 0.5 * lo());  // halves: no overflow at ±1e308
  }
};

Axis make_axis(const std::vector<double>& values, AxisScale scale, int max_ticks) {
  Axis a;
  a.scale = scale;
  if (values.empty()) {
    a.ticks = scale == AxisScale::Log2 ? log2_ticks(1, 2, max_ticks) : nice_ticks(0, 1, max_ticks);
    return a;
  }
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  a.ticks = scale == AxisScale::Log2 ? log2_ticks(*lo, *hi, max_ticks) : nice_ticks(*lo, *hi, max_ticks);
  return a;
}

std::string tick_label(double v, const Axis& axis) {
  char buf[48];
  if (axis.scale == AxisScale::Log2) {
    const int e = int(std::lround(std::log2(v)));
    if (e >= 0 && e <= 20) {
      std::snprintf(buf, sizeof buf, "%.0f", v);
    } else if (e >= -4 && e < 0) {
      std::snprintf(buf, sizeof buf, "%g", v);
    } else {
      std::snprintf(buf, sizeof buf, "2^%d", e);
    }
    return buf;
  }
  const double step = axis.ticks[1] - axis.ticks[0];  // inf for the fallback ticks {-1e308, 1e308}
  if (!std::isfinite(step)) {
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
  }
  if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0" or "1e-17"
  const int decimals = int(std::clamp(-std::floor(std::log10(step) + 1e-9), 0.0, 20.0));
  const double biggest = std::max(std::fabs(axis.lo()), std::fabs(axis.hi()));
  if (biggest >= 1e7 || decimals > 6) {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

struct Box {
  double x0, y0, x1, y1;  // left, top, right, bottom
  double x(const Axis& a, double v) const { return x0 + a.frac(v) * (x1 - x0); }
  double y(const Axis& a, double v) const { return y1 - a.frac(v) * (y1 - y0); }
};

void text(std::string& out, const char* cls, double x, double y, const char* anchor, const std::string& s,
          const std::string& extra = "") {
  out += "<text class=\"" + std::string(cls) + "\" x=\"" + px(x) + "\" y=\"" + px(y) + "\" text-anchor=\"" + anchor +
         "\"" + extra + ">" + xml_escape(s) + "</text>\n";
}

void line(std::string& out, const char* cls, double x1, double y1, double x2, double y2, const std::string& style) {
  out += "<line class=\"" + std::string(cls) + "\" x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) +
         "\" y2=\"" + px(y2) + "\" " + style + "/>\n";
}

std::string cross_path(double x, double y) {
  std::string d = "M";
  d += px(x - 4) + "," + px(y - 4) + " L" + px(x + 4) + "," + px(y + 4);
  d += " M" + px(x - 4) + "," + px(y + 4) + " L" + px(x + 4) + "," + px(y - 4);
  return d;
}

void render_series(std::string& out, const Series& s, const std::string& color, const Box& box, const Axis& xa,
                   const Axis& ya) {
  std::vector<std::pair<double, double>> pts;  // pixel coordinates of the drawable points
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !drawable(s.y[i], ya.scale)) continue;
    const double x = box.x(xa, s.x[i]), y = box.y(ya, s.y[i]);
    if (std::isfinite(x) && std::isfinite(y)) pts.emplace_back(x, y);
  }
  if (pts.empty()) return;
  std::string d;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    d += i ? " L" : "M";
    d += px(pts[i].first) + "," + px(pts[i].second);
  }
  out += "<path class=\"series\" d=\"" + d + "\" fill=\"none\" stroke=\"" + xml_escape(color) +
         "\" stroke-width=\"1.5\" stroke-linejoin=\"round\"/>\n";
  if (s.points || pts.size() == 1) {
    for (const auto& [x, y] : pts) {
      out += "<circle class=\"point\" cx=\"" + px(x) + "\" cy=\"" + px(y) + "\" r=\"2.5\" fill=\"" + xml_escape(color) +
             "\"/>\n";
    }
  }
}

void render_markers(std::string& out, const Markers& m, const Box& box, const Axis& xa, const Axis& ya) {
  const std::string color = xml_escape(m.color);
  for (std::size_t i = 0; i < m.x.size(); ++i) {
    if (!std::isfinite(m.x[i])) continue;
    const double x = box.x(xa, m.x[i]);
    if (!std::isfinite(x)) continue;
    if (m.style == MarkerStyle::VerticalLine) {
      line(out, "marker", x, box.y0, x, box.y1,
           "stroke=\"" + color + "\" stroke-width=\"1\" stroke-dasharray=\"3,3\" stroke-opacity=\"0.7\"");
      continue;
    }
    double y = box.y1;
    if (!m.y.empty()) {
      if (!drawable(m.y[i], ya.scale)) continue;
      y = box.y(ya, m.y[i]);
      if (!std::isfinite(y)) continue;
    }
    out += "<path class=\"marker\" d=\"" + cross_path(x, y) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\"/>\n";
  }
}

// The legend goes in the plot corner that covers the fewest data points (top right, top left,
// bottom right, bottom left in that order of preference), so it does not hide the end of a
// rising accuracy curve.
void render_legend(std::string& out, const Panel& p, const std::vector<std::string>& colors, const Box& box,
                   const Axis& x_axis, const Axis& y_axis) {
  struct Entry {
    std::string name, color;
    int kind;  // 0 line, 1 dashed line, 2 cross
  };
  std::vector<Entry> entries;
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    if (!p.series[i].name.empty()) entries.push_back({p.series[i].name, colors[i], 0});
  }
  for (const Markers& m : p.markers) {
    if (!m.name.empty()) entries.push_back({m.name, m.color, m.style == MarkerStyle::VerticalLine ? 1 : 2});
  }
  if (entries.empty()) return;
  std::size_t longest = 0;
  for (const Entry& e : entries) longest = std::max(longest, e.name.size());
  const double w = 34 + kCharWidth * double(std::min<std::size_t>(longest, 60)), h = 8 + 16 * double(entries.size());
  // Points and line segments (sampled) of the series inside the legend's corner, its margin included.
  auto covered = [&](double x0, double y0) {
    auto inside = [&](double px_, double py_) {
      return px_ >= x0 - 8 && px_ <= x0 + w + 8 && py_ >= y0 - 8 && py_ <= y0 + h + 8;
    };
    int64_t n = 0;
    for (const Series& s : p.series) {
      bool have_prev = false;
      double qx = 0, qy = 0;
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (!std::isfinite(s.x[i]) || !drawable(s.y[i], p.y_scale)) continue;
        const double px_ = box.x(x_axis, s.x[i]), py_ = box.y(y_axis, s.y[i]);
        n += inside(px_, py_);
        for (int k = 1; have_prev && k < 8; ++k) n += inside(qx + (px_ - qx) * k / 8, qy + (py_ - qy) * k / 8);
        qx = px_, qy = py_, have_prev = true;
      }
    }
    return n;
  };
  const double corners[4][2] = {{box.x1 - w - 6, box.y0 + 6}, {box.x0 + 6, box.y0 + 6},
                                {box.x1 - w - 6, box.y1 - h - 6}, {box.x0 + 6, box.y1 - h - 6}};
  double x0 = corners[0][0], y0 = corners[0][1];
  int64_t best = covered(x0, y0);
  for (int c = 1; c < 4 && best > 0; ++c) {
    const int64_t n = covered(corners[c][0], corners[c][1]);
    if (n < best) best = n, x0 = corners[c][0], y0 = corners[c][1];
  }
  out += "<g class=\"legend\" font-size=\"11\">\n";
  out += "<rect x=\"" + px(x0) + "\" y=\"" + px(y0) + "\" width=\"" + px(w) + "\" height=\"" + px(h) +
         "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const double y = y0 + 12 + 16 * double(i);
    const std::string color = xml_escape(e.color);
    if (e.kind == 2) {
      out += "<path d=\"" + cross_path(x0 + 16, y) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\"/>\n";
    } else {
      line(out, "swatch", x0 + 6, y, x0 + 26, y,
           "stroke=\"" + color + "\" stroke-width=\"" + (e.kind == 0 ? "2" : "1\" stroke-dasharray=\"3,3") + "\"");
    }
    text(out, "legend-text", x0 + 30, y + 4, "start", e.name);
  }
  out += "</g>\n";
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  max_ticks = std::max(max_ticks, 2);
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (lo > hi) std::swap(lo, hi);
  if (lo == hi) {
    // A constant series: a band of 10% around the value (or [-1, 1] around 0).
    const double d = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= d, hi += d;
  }
  const double span = hi - lo;
  if (!std::isfinite(span) || !(span > 0)) return {lo, hi};
  const double mag = std::pow(10.0, std::floor(std::log10(span / (max_ticks - 1))));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    const double step = m * mag;
    if (!(step > 0) || !std::isfinite(step)) break;
    const double a = std::floor(lo / step), b = std::ceil(hi / step);
    // Beyond 2^53 steps from 0 the multiples of step are no longer distinct doubles.
    if (!std::isfinite(a) || !std::isfinite(b) || std::fabs(a) > 9e15 || std::fabs(b) > 9e15) break;
    if (b - a + 1 > max_ticks) continue;
    std::vector<double> ticks;
    for (double k = a; k <= b; k += 1) ticks.push_back(k * step);
    if (ticks.size() >= 2) return ticks;
  }
  return {lo, hi};
}

std::vector<double> log2_ticks(double lo, double hi, int max_ticks) {
  max_ticks = std::max(max_ticks, 2);
  if (!(lo > 0) || !std::isfinite(lo) || !(hi > 0) || !std::isfinite(hi)) return {1.0, 2.0};
  if (lo > hi) std::swap(lo, hi);
  // Exponents of the finite powers of two: 2^-1074 (smallest subnormal) to 2^1023.
  int e_lo = std::max(-1074, int(std::floor(std::log2(lo))));
  int e_hi = std::min(1023, int(std::ceil(std::log2(hi))));
  if (e_lo >= e_hi) {  // a constant value: one power of two either side
    e_lo = std::max(-1074, e_hi - 1);
    e_hi = std::min(1023, e_lo + 2);
  }
  for (int k = 1;; ++k) {
    const int a = int(std::floor(double(e_lo) / k)) * k;
    const int b = int(std::ceil(double(e_hi) / k)) * k;
    if ((b - a) / k + 1 > max_ticks) continue;
    // Exponents that are multiples of k; at the very ends of the double range the outer ones are
    // clamped to 2^-1074 and 2^1023 (the only place where the spacing is irregular).
    std::vector<double> ticks;
    for (int e = a; e <= b; e += k) {
      const double t = std::ldexp(1.0, std::clamp(e, -1074, 1023));
      if (ticks.empty() || t != ticks.back()) ticks.push_back(t);
    }
    return ticks;
  }
}

std::string xml_escape(const std::string& s) {
  const bool utf8 = io::detail::valid_utf8(s);
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if ((u < 0x20 && c != '\t' && c != '\n' && c != '\r') || u == 0x7F || (!utf8 && u >= 0x80)) {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string render_svg(const Figure& fig) {
  MG_CHECK(fig.width >= 200 && fig.panel_height >= 60, Error, "render_svg: the figure must be at least 200 px wide ",
           "and each panel at least 60 px high; got width ", fig.width, ", panel_height ", fig.panel_height);
  std::vector<double> xs;  // every x that will be drawn, for the shared x axis
  for (std::size_t p = 0; p < fig.panels.size(); ++p) {
    const Panel& panel = fig.panels[p];
    for (const Series& s : panel.series) {
      MG_CHECK(s.x.size() == s.y.size(), Error, "render_svg: series ", io::detail::quoted(s.name), " of panel ", p,
               " has ", s.x.size(), " x values but ", s.y.size(), " y values");
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (std::isfinite(s.x[i]) && drawable(s.y[i], panel.y_scale)) xs.push_back(s.x[i]);
      }
    }
    for (const Markers& m : panel.markers) {
      MG_CHECK(m.style == MarkerStyle::Point || m.y.empty(), Error, "render_svg: vertical-line markers ",
               io::detail::quoted(m.name), " of panel ", p, " take no y values");
      MG_CHECK(m.y.empty() || m.y.size() == m.x.size(), Error, "render_svg: markers ", io::detail::quoted(m.name),
               " of panel ", p, " have ", m.x.size(), " x values but ", m.y.size(), " y values");
      for (double x : m.x) {
        if (std::isfinite(x)) xs.push_back(x);
      }
    }
  }
  const Axis x_axis = make_axis(xs, AxisScale::Linear, kMaxXTicks);

  const double top = fig.title.empty() ? kTopNoTitle : kTitle;
  const double n = double(fig.panels.size());
  const double height = top + n * (kPanelTitle + fig.panel_height) + std::max(0.0, n - 1) * kGap + kBottom;
  const double width = fig.width;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + px(width) + "\" height=\"" +
         px(height) + "\" viewBox=\"0 0 " + px(width) + " " + px(height) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect x=\"0\" y=\"0\" width=\"" + px(width) + "\" height=\"" + px(height) + "\" fill=\"white\"/>\n";
  if (!fig.title.empty()) text(out, "title", width / 2, 26, "middle", fig.title, " font-size=\"16\"");

  double y = top;
  for (std::size_t p = 0; p < fig.panels.size(); ++p) {
    const Panel& panel = fig.panels[p];
    const bool bottom = p + 1 == fig.panels.size();
    const Box box{kLeft, y + kPanelTitle, width - kRight, y + kPanelTitle + fig.panel_height};
    std::vector<double> ys;
    for (const Series& s : panel.series) {
      for (std::size_t i = 0; i < s.y.size(); ++i) {
        if (std::isfinite(s.x[i]) && drawable(s.y[i], panel.y_scale)) ys.push_back(s.y[i]);
      }
    }
    for (const Markers& m : panel.markers) {
      for (std::size_t i = 0; i < m.y.size(); ++i) {
        if (std::isfinite(m.x[i]) && drawable(m.y[i], panel.y_scale)) ys.push_back(m.y[i]);
      }
    }
    const Axis y_axis = make_axis(ys, panel.y_scale, kMaxYTicks);

    out += "<g class=\"panel\">\n";
    text(out, "panel-title", box.x0, y + kPanelTitle - 8, "start", panel.title, " font-weight=\"bold\"");
    for (double t : y_axis.ticks) {
      const double ty = box.y(y_axis, t);
      line(out, "grid", box.x0, ty, box.x1, ty, "stroke=\"#e5e5e5\" stroke-width=\"1\"");
      text(out, "ytick", box.x0 - 6, ty + 4, "end", tick_label(t, y_axis));
    }
    for (double t : x_axis.ticks) {
      const double tx = box.x(x_axis, t);
      line(out, "grid", tx, box.y0, tx, box.y1, "stroke=\"#e5e5e5\" stroke-width=\"1\"");
      if (bottom) text(out, "xtick", tx, box.y1 + 16, "middle", tick_label(t, x_axis));
    }
    if (!panel.y_label.empty()) {
      const double cx = 16, cy = (box.y0 + box.y1) / 2;
      text(out, "ylabel", cx, cy, "middle", panel.y_label, " transform=\"rotate(-90 " + px(cx) + " " + px(cy) + ")\"");
    }
    std::vector<std::string> colors;
    for (std::size_t i = 0; i < panel.series.size(); ++i) {
      colors.push_back(panel.series[i].color.empty() ? kPalette[i % kPaletteSize] : panel.series[i].color);
    }
    for (const Markers& m : panel.markers) {
      if (m.style == MarkerStyle::VerticalLine) render_markers(out, m, box, x_axis, y_axis);
    }
    for (std::size_t i = 0; i < panel.series.size(); ++i)
      render_series(out, panel.series[i], colors[i], box, x_axis, y_axis);
    for (const Markers& m : panel.markers) {
      if (m.style == MarkerStyle::Point) render_markers(out, m, box, x_axis, y_axis);
    }
    out += "<rect class=\"frame\" x=\"" + px(box.x0) + "\" y=\"" + px(box.y0) + "\" width=\"" + px(box.x1 - box.x0) +
           "\" height=\"" + px(box.y1 - box.y0) + "\" fill=\"none\" stroke=\"#888888\"/>\n";
    render_legend(out, panel, colors, box, x_axis, y_axis);
    out += "</g>\n";
    y = box.y1 + kGap;
  }
  if (!fig.panels.empty() && !fig.x_label.empty()) {
    text(out, "xlabel", (kLeft + width - kRight) / 2, height - 10, "middle", fig.x_label);
  }
  out += "</svg>\n";
  return out;
}

void write_svg(const std::string& path, const Figure& fig) {
  const std::string svg = render_svg(fig);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  MG_CHECK(f.good(), Error, "write_svg: cannot open ", io::detail::quoted(path), " for writing",
           "\n  hint: the directory must exist and be writable");
  f.write(svg.data(), std::streamsize(svg.size()));
  f.close();
  MG_CHECK(!f.fail(), Error, "write_svg: writing ", io::detail::quoted(path), " failed");
}

}  // namespace mg::example
