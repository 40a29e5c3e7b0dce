/* FX_INTERNAL: marks the internal functions of libflexpoint that libflexpoint_train calls
 * (errors, allocation, storage settling, tensor-state and file I/O, two nn entry points).
 * Both libraries are compiled with hidden visibility, so a function that crosses from one
 * shared library to the other needs default visibility; these are declared in src/ headers
 * only, never in include/, and are not part of the public API. Static builds need nothing. */
#ifndef FX_CORE_INTERNAL_EXPORT_H
#define FX_CORE_INTERNAL_EXPORT_H

#if defined(FLEXPOINT_BUILD_SHARED) && defined(__GNUC__)
#define FX_INTERNAL __attribute__((visibility("default")))
#else
#define FX_INTERNAL
#endif

#endif
