// thrown<E>(f): the message of the E that f throws, "<no exception>" or "<other exception: ...>"
// otherwise; CHECK_THAT(thrown<E>(...), Contains(...)) checks a type and a message with one call.
#pragma once
#include <exception>
#include <string>

namespace mg::test {

template <typename E, typename F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other exception: ") + e.what() + ">";
  }
  return "<no exception>";
}

}  // namespace mg::test
