#include "base/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

namespace latte {

Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string dims;
  size_t count = 1;
  for (int64_t s : shape) {
    dims += std::to_string(s) + ", ";
    count *= static_cast<size_t>(s);
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(3,)" keeps its comma
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + header length (2) + header, padded with spaces and a
  // newline to a multiple of 64 bytes, as NumPy does.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return Status::NotFound(path + ": cannot open for writing");
  const uint8_t preamble[10] = {0x93,
                                'N',
                                'U',
                                'M',
                                'P',
                                'Y',
                                1,
                                0,
                                static_cast<uint8_t>(header.size() & 0xff),
                                static_cast<uint8_t>(header.size() >> 8)};
  bool ok = std::fwrite(preamble, 1, 10, f.get()) == 10 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
            std::fwrite(data, sizeof(float), count, f.get()) == count;
  ok = (std::fflush(f.get()) == 0) && ok;
  if (!ok) return Status::Internal(path + ": write failed");
  return Status::Ok();
}

Result<std::vector<float>> ReadNpyF32(const std::string& path, std::vector<int64_t>* shape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  char preamble[10];
  if (!in.read(preamble, 10) || std::memcmp(preamble, "\x93NUMPY", 6) != 0) {
    return Status::DataLoss(path + ": not a .npy file");
  }
  const size_t header_len = static_cast<uint8_t>(preamble[8]) | (static_cast<uint8_t>(preamble[9]) << 8);
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) return Status::DataLoss(path + ": truncated header");
  if (header.find("'<f4'") == std::string::npos || header.find("False") == std::string::npos) {
    return Status::Unimplemented(path + ": only little-endian float32 C-order arrays are supported");
  }
  const size_t open = header.find('(', header.find("'shape'"));
  const size_t close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) return Status::DataLoss(path + ": no shape");
  shape->clear();
  size_t count = 1;
  for (size_t i = open + 1; i < close;) {
    while (i < close && (header[i] == ' ' || header[i] == ',')) ++i;
    if (i >= close) break;
    size_t used = 0;
    const int64_t dim = std::stoll(header.substr(i, close - i), &used);
    shape->push_back(dim);
    count *= static_cast<size_t>(dim);
    i += used;
  }
  std::vector<float> data(count);
  if (!in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(count * sizeof(float)))) {
    return Status::DataLoss(path + ": truncated data");
  }
  return data;
}

}  // namespace latte
