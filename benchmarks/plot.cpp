// gnuplot output. See plot.hpp.
#include "plot.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>

namespace bench {

namespace {

constexpr int kPlotHeight = 600;       // pixels of the axes area
constexpr int kLegendRowHeight = 18;   // pixels per legend row

std::string series_name(const Result& r) {
  const Problem& p = r.c.problem;
  std::string s = r.c.impl + " " + pass_name(p.pass) + " " + flashattn::dtype_name(p.dtype) + (p.causal ? " causal" : "") +
                  " d=" + std::to_string(p.head_dim);
  if (r.c.impl == "cpu" && (r.c.block_q || r.c.block_k))
    s += " " + std::to_string(r.c.block_q) + "x" + std::to_string(r.c.block_k);
  return s;
}

}  // namespace

bool plot(const std::string& prefix, const MachineInfo& m, const std::vector<Result>& rs) {
  std::map<std::string, std::vector<const Result*>> series;
  for (const Result& r : rs)
    if (r.status == "ok") series[series_name(r)].push_back(&r);
  if (series.empty()) {
    std::cerr << "plot: no results to draw\n";
    return false;
  }
  const std::string dat = prefix + ".dat", gp = prefix + ".gp";
  {
    std::ofstream f(dat);
    for (const auto& [name, pts] : series) {
      f << "# " << name << "\n# seqlen_k gflops extra_bytes\n";
      for (const Result* r : pts) f << r->c.problem.seqlen_k << ' ' << r->gflops << ' ' << r->extra_bytes << '\n';
      f << "\n\n";  // gnuplot data set separator (index)
    }
  }
  std::ofstream g(gp);
  const int rows = static_cast<int>(series.size() + 1) / 2;  // legend entries below the plot, two columns
  g << "set terminal pngcairo size 1200," << kPlotHeight + kLegendRowHeight * rows << " font ',10' noenhanced\n"
    << "set key below\nset grid\nset logscale x 2\nset xlabel 'sequence length (keys)'\n";
  auto lines = [&](int column) {
    int i = 0;
    g << "plot ";
    for (const auto& entry : series) {
      g << (i ? ", \\\n     " : "") << "'" << dat << "' index " << i << " using 1:" << column << " with linespoints title '"
        << entry.first << "'";
      ++i;
    }
    g << '\n';
  };
  g << "set output '" << prefix << "-throughput.png'\n"
    << "set ylabel 'GFLOP/s'\nset title 'throughput (" << m.cpu_model << ", " << m.threads << " threads; FMA peak "
    << static_cast<int>(m.peak()) << " GFLOP/s";
  if (m.bf16_peak() > 0) g << ", bf16 dot peak " << static_cast<int>(m.bf16_peak()) << " GFLOP/s";
  g << ")'\n";
  g << "set arrow from graph 0, first " << m.peak() << " to graph 1, first " << m.peak() << " nohead dt 2\n";
  if (m.bf16_peak() > 0)  // dotted: the ceiling of the bf16 cases
    g << "set arrow from graph 0, first " << m.bf16_peak() << " to graph 1, first " << m.bf16_peak() << " nohead dt 3\n";
  lines(2);
  g << "unset arrow\nset output '" << prefix << "-memory.png'\nset logscale y 2\nset format y '%.0b %BB'\n"
    << "set ylabel 'extra memory (bytes)'\n"
    << "set title 'memory beyond inputs and outputs'\n";
  lines(3);
  g.close();
  const std::string cmd = "gnuplot '" + gp + "'";
  if (std::system(cmd.c_str()) != 0) {
    std::cerr << "plot: '" << cmd << "' failed (is gnuplot installed?)\n";
    return false;
  }
  std::cerr << "plot: wrote " << prefix << "-throughput.png and " << prefix << "-memory.png\n";
  return true;
}

}  // namespace bench
