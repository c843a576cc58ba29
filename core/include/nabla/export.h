#pragma once
// NABLA_API marks what the core shares library exports; everything else is
// hidden so plugins can only bind to the documented interface.
#define NABLA_API __attribute__((visibility("default")))
