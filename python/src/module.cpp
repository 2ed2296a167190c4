// ckv._ckv: the module and ckv's error types as Python exceptions (docs/PYTHON.md "Errors").
#include <string>

#include "bindings.h"

namespace ckv::py {

namespace {

// One Python class per ckv error type, derived as the C++ types are; the message is the
// library's one line, the one the CLI prints after "ckv: error: ".
// Raw references kept for the life of the process (no destructor runs after Python ends).
struct ErrorTypes {
  PyObject *error, *format, *unsupported, *input, *usage, *device, *io;
};
ErrorTypes& error_types() {
  static ErrorTypes types;
  return types;
}

PyObject* make_error(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  PyObject* type = PyErr_NewExceptionWithDoc((std::string("ckv.") + name).c_str(), doc, base, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

}  // namespace

void register_errors(nb::module_& m) {
  ErrorTypes& t = error_types();
  t.error = make_error(m, "Error", PyExc_RuntimeError, "Base of every error ckv reports (ckv::Error).");
  t.format = make_error(m, "FormatError", t.error, "A malformed, truncated or inconsistent file.");
  t.unsupported = make_error(m, "UnsupportedError", t.error, "A valid request ckv does not support.");
  t.input = make_error(m, "InputError", t.error, "Bad input: arguments, token ids, shapes.");
  t.usage = make_error(m, "UsageError", t.input, "An argument whose value is wrong in itself (the CLI's exit 2).");
  t.device = make_error(m, "DeviceError", t.error, "A failure of the compute device.");
  t.io = make_error(m, "IoError", t.error, "A file that cannot be opened, mapped or written.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    const ErrorTypes& types = error_types();
    auto raise = [](PyObject* type, const std::exception& e) { PyErr_SetString(type, e.what()); };
    try {
      std::rethrow_exception(p);
    } catch (const UsageError& e) {
      raise(types.usage, e);
    } catch (const InputError& e) {
      raise(types.input, e);
    } catch (const FormatError& e) {
      raise(types.format, e);
    } catch (const UnsupportedError& e) {
      raise(types.unsupported, e);
    } catch (const DeviceError& e) {
      raise(types.device, e);
    } catch (const IoError& e) {
      raise(types.io, e);
    } catch (const Error& e) {
      raise(types.error, e);
    }
  });
}

}  // namespace ckv::py

NB_MODULE(_ckv, m) {
  m.doc() = "ckv's C++ library (docs/PYTHON.md); use the package ckv, not this module.";
  ckv::py::register_errors(m);
  ckv::py::register_model(m);
  ckv::py::register_analysis(m);
}
